//! `cargo xtask bench`: `kestrel bench` on the test models and, when `LLAMA_BENCH` names a
//! llama-bench binary, llama-bench with the same settings, interleaved (kestrel, llama.cpp,
//! kestrel, llama.cpp, ...) so both see the same machine noise; then a table of medians and the
//! ratio kestrel / llama.cpp per test.
//!
//! Each round runs one `kestrel bench --json` and one `llama-bench -o json` (each with its own
//! warm-up and `-r 1`); the median is over `--rounds` rounds. With `--batch B` (default 8) the
//! round also measures B sequences decoded together: kestrel's `tg<N>@b<B>` and
//! `llama-batched-bench -npp 1 -ntg N -npl B` (found beside llama-bench, or at
//! `LLAMA_BATCHED_BENCH`), aggregate tokens per second, and the table adds each engine's
//! batched / single-sequence decode ratio.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::models;

/// Settings of `cargo xtask bench`.
pub struct Options {
    /// Models (short names); empty: every light model.
    pub models: Vec<String>,
    pub threads: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub rounds: usize,
    /// Sequences of the batched decode test (0 or 1: none).
    pub batch: usize,
}

/// One test's tok/s from one run, keyed by llama-bench's test name (`pp512`, `tg128`,
/// `tg128@b8`).
type Samples = Vec<(String, f64)>;

fn test_name(t: &serde_json::Value) -> Result<String> {
    if let Some(name) = t["test"].as_str() {
        return Ok(name.to_string());
    }
    let np = t["n_prompt"].as_u64().context("no n_prompt")?;
    let ng = t["n_gen"].as_u64().context("no n_gen")?;
    Ok(if np > 0 {
        format!("pp{np}")
    } else {
        format!("tg{ng}")
    })
}

fn parse_runs(json: &str) -> Result<Samples> {
    let v: serde_json::Value =
        serde_json::from_str(json).context("the benchmark did not print a JSON array")?;
    let arr = v
        .as_array()
        .context("the benchmark's JSON is not an array")?;
    let mut out = Vec::new();
    for t in arr {
        let ts = t["avg_ts"].as_f64().context("no avg_ts")?;
        out.push((test_name(t)?, ts));
    }
    Ok(out)
}

/// llama-batched-bench's `--output-format jsonl` lines: `tg<N>@b<B>` at `speed_tg`.
fn parse_batched(text: &str) -> Result<Samples> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line.trim()).context("a bad jsonl line")?;
        let tg = v["tg"].as_u64().context("no tg")?;
        let pl = v["pl"].as_u64().context("no pl")?;
        let ts = v["speed_tg"].as_f64().context("no speed_tg")?;
        out.push((format!("tg{tg}@b{pl}"), ts));
    }
    if out.is_empty() {
        bail!("llama-batched-bench printed no jsonl result");
    }
    Ok(out)
}

fn output_of(cmd: &mut Command) -> Result<String> {
    let what = format!("{cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn kestrel_cmd(bin: &Path, model: &Path, o: &Options) -> Command {
    let mut c = Command::new(bin);
    c.arg("bench")
        .arg("-m")
        .arg(model)
        .args(["-p", &o.n_prompt.to_string()])
        .args(["-n", &o.n_gen.to_string()])
        .args(["-t", &o.threads.to_string()])
        .args(["-r", "1", "--json"]);
    if o.batch > 1 && o.n_gen > 0 {
        c.args(["--batch", &o.batch.to_string()]);
    }
    c
}

fn batched_cmd(bin: &Path, model: &Path, o: &Options) -> Command {
    let mut c = Command::new(bin);
    c.arg("-m")
        .arg(model)
        .args(["-npp", "1", "-ntg", &o.n_gen.to_string()])
        .args(["-npl", &o.batch.to_string()])
        .args(["-c", &(o.batch * (o.n_gen + 1)).max(512).to_string()])
        .args(["-t", &o.threads.to_string(), "--output-format", "jsonl"]);
    c
}

fn llama_cmd(bin: &Path, model: &Path, o: &Options) -> Command {
    let mut c = Command::new(bin);
    c.arg("-m")
        .arg(model)
        .args(["-p", &o.n_prompt.to_string()])
        .args(["-n", &o.n_gen.to_string()])
        .args(["-t", &o.threads.to_string()])
        .args(["-r", "1", "-o", "json"]);
    c
}

/// Runs the comparison; `kestrel` is the built release binary.
pub fn bench(kestrel: &Path, o: &Options) -> Result<()> {
    let dir = models::models_dir()?;
    let names: Vec<&models::Model> = if o.models.is_empty() {
        models::MODELS
            .iter()
            .filter(|m| !m.heavy && m.kind == models::Kind::Decoder)
            .collect()
    } else {
        o.models
            .iter()
            .map(|n| models::find(n))
            .collect::<Result<_>>()?
    };
    let llama: Option<PathBuf> = std::env::var_os("LLAMA_BENCH").map(PathBuf::from);
    let batched: Option<PathBuf> = if o.batch > 1 && o.n_gen > 0 {
        std::env::var_os("LLAMA_BATCHED_BENCH")
            .map(PathBuf::from)
            .or_else(|| {
                let p = llama.as_ref()?.with_file_name("llama-batched-bench");
                p.is_file().then_some(p)
            })
    } else {
        None
    };
    if let Some(p) = &batched {
        println!("==> bench: batched decode also with {}", p.display());
    }
    match &llama {
        Some(p) => println!(
            "==> bench: interleaving with llama-bench at {}",
            p.display()
        ),
        None => println!("==> bench: LLAMA_BENCH not set: kestrel only"),
    }
    println!(
        "==> bench: {} rounds, {} threads, pp{} / tg{} / tg{}@b{}",
        o.rounds, o.threads, o.n_prompt, o.n_gen, o.n_gen, o.batch
    );
    let mut table = String::from(
        "| model | test | kestrel t/s (median) | llama.cpp t/s (median) | ratio |\n| --- | --- | ---: | ---: | ---: |\n",
    );
    for m in names {
        let path = m.path_in(&dir);
        if !path.is_file() {
            bail!(
                "{} is not in the cache ({}): run `cargo xtask fetch-models {}`",
                m.name,
                path.display(),
                m.name
            );
        }
        let mut ours: Vec<(String, Vec<f64>)> = Vec::new();
        let mut theirs: Vec<(String, Vec<f64>)> = Vec::new();
        let push = |acc: &mut Vec<(String, Vec<f64>)>, s: Samples| {
            for (k, v) in s {
                match acc.iter_mut().find(|(kk, _)| *kk == k) {
                    Some((_, vs)) => vs.push(v),
                    None => acc.push((k, vec![v])),
                }
            }
        };
        for round in 0..o.rounds {
            let k = parse_runs(&output_of(&mut kestrel_cmd(kestrel, &path, o))?)?;
            push(&mut ours, k);
            if let Some(l) = &llama {
                let s = parse_runs(&output_of(&mut llama_cmd(l, &path, o))?)?;
                push(&mut theirs, s);
            }
            if let Some(b) = &batched {
                let s = parse_batched(&output_of(&mut batched_cmd(b, &path, o))?)?;
                push(&mut theirs, s);
            }
            println!(
                "==> bench: {} round {}/{} done",
                m.name,
                round + 1,
                o.rounds
            );
        }
        let mut single = (None, None);
        let mut multi = (None, None);
        for (test, vs) in &mut ours {
            let k = median(vs);
            let l = theirs
                .iter_mut()
                .find(|(kk, _)| kk == test)
                .map(|(_, v)| median(v));
            let (ls, ratio) = match l {
                Some(l) => (format!("{l:.2}"), format!("{:.2}", k / l)),
                None => ("-".into(), "-".into()),
            };
            if test.starts_with("tg") {
                if test.contains("@b") {
                    multi = (Some(k), l);
                } else {
                    single = (Some(k), l);
                }
            }
            table.push_str(&format!(
                "| {} | {test} | {k:.2} | {ls} | {ratio} |\n",
                m.file
            ));
        }
        if let (Some(s), Some(b)) = (single.0, multi.0) {
            let theirs = match (single.1, multi.1) {
                (Some(s), Some(b)) => format!("{:.2}", b / s),
                _ => "-".into(),
            };
            table.push_str(&format!(
                "| {} | b{} / tg (batched gain) | {:.2} | {theirs} | |\n",
                m.file,
                o.batch,
                b / s
            ));
        }
    }
    print!("{table}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llama_bench_and_kestrel_json() {
        let j = r#"[{"n_prompt": 512, "n_gen": 0, "avg_ts": 300.5, "x": 1},
                    {"n_prompt": 0, "n_gen": 128, "avg_ts": 99.0},
                    {"test": "tg128@b8", "n_prompt": 0, "n_gen": 128, "avg_ts": 400.0}]"#;
        assert_eq!(
            parse_runs(j).unwrap(),
            vec![
                ("pp512".to_string(), 300.5),
                ("tg128".to_string(), 99.0),
                ("tg128@b8".to_string(), 400.0)
            ]
        );
        assert!(parse_runs("{}").is_err());
        assert!(parse_runs("[{\"n_prompt\": 1}]").is_err());
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn parses_llama_batched_bench_jsonl() {
        let text = "main: n_kv_max = 2048\n{\"n_kv_max\": 2048, \"pp\": 1, \"tg\": 128, \"pl\": 8, \"n_kv\": 1032, \"t_pp\": 0.01, \"speed_pp\": 800.0, \"t_tg\": 2.0, \"speed_tg\": 512.0, \"t\": 2.01, \"speed\": 513.0}\n";
        assert_eq!(
            parse_batched(text).unwrap(),
            vec![("tg128@b8".to_string(), 512.0)]
        );
        assert!(parse_batched("nothing\n").is_err());
    }
}
