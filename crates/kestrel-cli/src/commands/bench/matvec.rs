//! `kestrel bench --device cuda --matvec [ROWS,...]`: the weights a decode step multiplies by,
//! by group (one projection across the layers, or the output), each group timed alone as a pass
//! of back-to-back matmuls replayed from a CUDA graph ([`CudaDevice::time_matmuls`]) for `ROWS`
//! activation rows (1: decode; 2-8: batched decode's matvec; 9-64: the tensor-core matvec), and
//! for one row under each setting of the prefetching matvecs. Weight bytes read a second, against
//! the device's copy bandwidth, say which kernels hold decode below that roof and how much of a
//! decode step the matmuls are (as llama.cpp's `test-backend-ops perf` does for one op).

use std::fmt::Write as _;

use kestrel::generate::Generator;
use kestrel::tensor::cuda::{CudaDevice, DeviceTensor};
use kestrel::tensor::{Shape, Tensor};
use serde_json::{json, Value};

/// Most activation rows a timed matmul takes: the tensor-core matvec's (more take the GEMM,
/// which a graph of one pass does not capture).
pub const MAX_ROWS: usize = 64;

/// Why `--matvec` did nothing on the CPU.
pub const NOT_ON_GPU: &str = "--matvec times the GPU's kernels: run it with --device cuda";

/// Weights of one shape and type that play the same part in every layer.
struct Group {
    /// The name with the layer as `*`: `blk.*.ffn_up.weight`.
    label: String,
    dtype: kestrel::tensor::DType,
    /// Output rows and the row length.
    m: usize,
    k: usize,
    names: Vec<String>,
}

/// How the one-row matvec runs: prefetching kernels, and their CTAs an SM (0: one a row group).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Setting {
    prefetch: bool,
    ctas: usize,
}

impl Setting {
    fn label(self) -> String {
        match (self.prefetch, self.ctas) {
            (false, _) => "plain".into(),
            (true, 0) => "prefetch".into(),
            (true, n) => format!("prefetch, {n} CTAs/SM"),
        }
    }
}

/// One group timed at one row count and setting.
pub struct Timed {
    label: String,
    dtype: String,
    m: usize,
    k: usize,
    count: usize,
    rows: usize,
    setting: String,
    /// Whether this is the setting the decode test ran with.
    in_use: bool,
    bytes: u64,
    seconds: f64,
}

impl Timed {
    fn bytes_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-12)
    }
}

/// `blk.12.attn_q.weight` -> `blk.*.attn_q.weight`; other names as they are.
fn layer_pattern(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("blk.") {
        if let Some((layer, tail)) = rest.split_once('.') {
            if !layer.is_empty() && layer.bytes().all(|b| b.is_ascii_digit()) {
                return format!("blk.*.{tail}");
            }
        }
    }
    name.to_string()
}

/// The decode step's matmul weights grouped by part, type and shape, in first-use order.
fn groups(gen: &Generator) -> Result<Vec<Group>, String> {
    let model = gen.model();
    let names =
        kestrel::arch::decode_matmul_weights(model, gen.config()).map_err(|e| e.to_string())?;
    let mut out: Vec<Group> = Vec::new();
    for name in names {
        let (_, info) = model
            .tensor_location(&name)
            .ok_or_else(|| format!("{name}: not in the model"))?;
        let dims = info.dims();
        let dtype = kestrel::tensor::DType::try_from(info.ggml_type())
            .map_err(|e| format!("{name}: {e}"))?;
        let (Some(&k), Some(&m)) = (dims.first(), dims.get(1)) else {
            return Err(format!("{name}: not a matrix ({dims:?})"));
        };
        let (k, m) = (
            usize::try_from(k).map_err(|e| format!("{name}: {e}"))?,
            usize::try_from(m).map_err(|e| format!("{name}: {e}"))?,
        );
        let label = layer_pattern(&name);
        match out
            .iter_mut()
            .find(|g| g.label == label && g.dtype == dtype && g.m == m && g.k == k)
        {
            Some(g) => g.names.push(name),
            None => out.push(Group {
                label,
                dtype,
                m,
                k,
                names: vec![name],
            }),
        }
    }
    Ok(out)
}

/// Activation rows in [-1, 1), the same for every run.
fn activations(rows: usize, k: usize) -> Vec<f32> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..rows * k)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

/// Times every group at each of `rows` (each within 1..=[`MAX_ROWS`]), and one row under each
/// prefetch setting; the device's matvec settings are as before afterwards.
///
/// # Errors
/// Not on a GPU; a weight the model lacks; the device's errors (out of memory, a launch).
pub fn time_groups(gen: &Generator, rows: &[usize], reps: usize) -> Result<Vec<Timed>, String> {
    let dev = gen.cuda_device().ok_or(NOT_ON_GPU)?;
    let groups = groups(gen)?;
    let now = Setting {
        prefetch: dev.mmvq_prefetch(),
        ctas: dev.mmvq_ctas_per_sm(),
    };
    let mut settings = vec![now];
    for s in [
        Setting {
            prefetch: false,
            ctas: 0,
        },
        Setting {
            prefetch: true,
            ctas: 0,
        },
        Setting {
            prefetch: true,
            ctas: 4,
        },
        Setting {
            prefetch: true,
            ctas: 8,
        },
    ] {
        // The plain kernels ignore the CTA setting.
        if !settings.iter().any(|t| t.label() == s.label()) {
            settings.push(s);
        }
    }
    let result = time_with(dev, gen, &groups, rows, reps, &settings, now);
    dev.set_mmvq_prefetch(now.prefetch);
    dev.set_mmvq_ctas_per_sm(now.ctas);
    result
}

fn time_with(
    dev: &CudaDevice,
    gen: &Generator,
    groups: &[Group],
    rows: &[usize],
    reps: usize,
    settings: &[Setting],
    now: Setting,
) -> Result<Vec<Timed>, String> {
    let err = |e: kestrel::tensor::TensorError| e.to_string();
    let mut out = Vec::new();
    for g in groups {
        let weights: Vec<DeviceTensor> = g
            .names
            .iter()
            .map(|name| {
                let t = kestrel::arch::weight_tensor(gen.model(), name)
                    .ok_or_else(|| format!("{name}: not a weight kestrel computes with"))?;
                dev.upload(&t).map_err(err)
            })
            .collect::<Result<_, String>>()?;
        let refs: Vec<&DeviceTensor> = weights.iter().collect();
        for &n in rows {
            // Float weights take launches of 8 rows past 8 (not one timed launch).
            if n > 8 && !g.dtype.is_quantized() {
                continue;
            }
            let x = Tensor::from_f32(Shape::matrix(n, g.k).map_err(err)?, &activations(n, g.k))
                .map_err(err)?;
            let x = dev.upload(&x).map_err(err)?;
            let mut y = dev
                .zeros_f32(Shape::matrix(n, g.m).map_err(err)?)
                .map_err(err)?;
            let only_now = [now];
            for s in if n == 1 { settings } else { &only_now[..] } {
                dev.set_mmvq_prefetch(s.prefetch);
                dev.set_mmvq_ctas_per_sm(s.ctas);
                let t = dev
                    .time_matmuls(&refs, &x, &mut y, reps)
                    .map_err(|e| format!("{} ({} rows): {e}", g.label, n))?;
                out.push(Timed {
                    label: g.label.clone(),
                    dtype: format!("{:?}", g.dtype),
                    m: g.m,
                    k: g.k,
                    count: g.names.len(),
                    rows: n,
                    setting: s.label(),
                    in_use: *s == now,
                    bytes: t.weight_bytes,
                    seconds: t.seconds,
                });
            }
        }
    }
    Ok(out)
}

/// The table: one line a group, row count and setting; then, for each row count and setting,
/// all groups together (a step's matmuls) against `step_s`, the decode test's median step.
pub fn table(timed: &[Timed], copy_bytes_per_s: Option<f64>, step_s: Option<f64>) -> String {
    let mut s = String::from(
        "\nEach group's matmuls alone, back to back from a CUDA graph (GB/s: weight bytes; a group \
         smaller than L2 may be read from it when replayed, past the copy bandwidth):\n\n\
         | matmul weights | type | m × k | layers | rows | matvec | µs each | GB/s | of copy |\n\
         | --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: |\n",
    );
    let share = |bps: f64| {
        copy_bytes_per_s.map_or_else(|| "-".into(), |c| format!("{:.1}%", 100.0 * bps / c))
    };
    for t in timed {
        let _ = writeln!(
            s,
            "| {} | {} | {} × {} | {} | {} | {}{} | {:.2} | {:.0} | {} |",
            t.label,
            t.dtype,
            t.m,
            t.k,
            t.count,
            t.rows,
            t.setting,
            if t.in_use { " (in use)" } else { "" },
            t.seconds * 1e6 / t.count.max(1) as f64,
            t.bytes_per_s() / 1e9,
            share(t.bytes_per_s()),
        );
    }
    let mut keys: Vec<(usize, &str)> = Vec::new();
    for t in timed {
        if !keys.contains(&(t.rows, t.setting.as_str())) {
            keys.push((t.rows, t.setting.as_str()));
        }
    }
    for (rows, setting) in keys {
        let (mut secs, mut bytes, mut n) = (0.0, 0u64, 0);
        for t in timed
            .iter()
            .filter(|t| t.rows == rows && t.setting == setting)
        {
            secs += t.seconds;
            bytes += t.bytes;
            n += t.count;
        }
        let bps = bytes as f64 / f64::max(secs, 1e-12);
        let _ = write!(
            s,
            "\nmatmuls of a step, {rows} row{}, {setting}: {n} weights, {:.1} µs, {:.0} GB/s ({} of copy)",
            if rows == 1 { "" } else { "s" },
            secs * 1e6,
            bps / 1e9,
            share(bps),
        );
        if let (1, Some(step)) = (rows, step_s) {
            let _ = write!(
                s,
                "; the decode step takes {:.1} µs, these kernels alone {:.0}% of it",
                step * 1e6,
                100.0 * secs / step.max(1e-12)
            );
        }
    }
    s.push('\n');
    s
}

/// JSON objects, one a timed group (with `--json`).
pub fn json(timed: &[Timed], copy_bytes_per_s: Option<f64>) -> Vec<Value> {
    timed
        .iter()
        .map(|t| {
            let mut o = json!({
                "test": "matvec",
                "weights": t.label,
                "type": t.dtype,
                "m": t.m,
                "k": t.k,
                "layers": t.count,
                "rows": t.rows,
                "setting": t.setting,
                "in_use": t.in_use,
                "weight_bytes": t.bytes,
                "seconds": t.seconds,
                "bytes_per_s": t.bytes_per_s(),
            });
            if let Some(c) = copy_bytes_per_s {
                o["copy_fraction"] = json!(t.bytes_per_s() / c.max(1.0));
            }
            o
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(label: &str, rows: usize, setting: &str, secs: f64, bytes: u64) -> Timed {
        Timed {
            label: label.into(),
            dtype: "Q4_K".into(),
            m: 4096,
            k: 4096,
            count: 32,
            rows,
            setting: setting.into(),
            in_use: setting == "plain",
            bytes,
            seconds: secs,
        }
    }

    #[test]
    fn layers_fold_into_one_pattern() {
        assert_eq!(layer_pattern("blk.12.attn_q.weight"), "blk.*.attn_q.weight");
        assert_eq!(
            layer_pattern("blk.0.ffn_down.weight"),
            "blk.*.ffn_down.weight"
        );
        assert_eq!(layer_pattern("output.weight"), "output.weight");
        assert_eq!(layer_pattern("blk.x.attn_q.weight"), "blk.x.attn_q.weight");
        assert_eq!(layer_pattern("blk..attn_q.weight"), "blk..attn_q.weight");
    }

    #[test]
    fn the_table_adds_a_steps_matmuls_and_holds_them_against_the_step() {
        let t = [
            timed("blk.*.attn_q.weight", 1, "plain", 100e-6, 300_000_000),
            timed("blk.*.ffn_up.weight", 1, "plain", 300e-6, 900_000_000),
            timed("blk.*.attn_q.weight", 1, "prefetch", 50e-6, 300_000_000),
        ];
        let s = table(&t, Some(4e12), Some(800e-6));
        // 100 µs over 32 layers each; 3 GB/s-scale numbers in GB/s.
        assert!(s.contains("| blk.*.attn_q.weight | Q4_K | 4096 × 4096 | 32 | 1 | plain (in use) | 3.12 | 3000 | 75.0% |"), "{s}");
        // Both plain groups: 1.2 GB in 400 µs = 3000 GB/s, half the 800 µs step.
        assert!(s.contains("1 row, plain: 64 weights, 400.0 µs, 3000 GB/s (75.0% of copy); the decode step takes 800.0 µs, these kernels alone 50% of it"), "{s}");
        assert!(
            s.contains("1 row, prefetch: 32 weights, 50.0 µs, 6000 GB/s"),
            "{s}"
        );
        let s = table(&t, None, None);
        assert!(s.contains("| 3000 | - |"), "{s}");
        let j = json(&t, Some(4e12));
        assert_eq!(j.len(), 3);
        assert_eq!(j[2]["setting"], "prefetch");
        assert!((j[0]["copy_fraction"].as_f64().unwrap() - 0.75).abs() < 1e-9);
    }

    #[test]
    fn activations_stay_in_range() {
        let a = activations(3, 100);
        assert_eq!(a.len(), 300);
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
        assert!(a.iter().any(|&v| v < -0.5) && a.iter().any(|&v| v > 0.5));
    }
}
