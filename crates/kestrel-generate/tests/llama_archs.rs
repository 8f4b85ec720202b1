//! kestrel against llama.cpp on llama.cpp's own random-weight file of each architecture.
//!
//! `test-llama-archs -s SEED [-d STDEV] -o DIR` (llama.cpp) writes a small random-weight GGUF per
//! architecture; `fixtures/archs/golden.json` holds llama.cpp's last-position logits on each
//! (made by `fixtures/archs/make_archs_golden.py`), for sets of files: seeds 1 and 2 with a
//! 16-token id prompt, and seed 3 at a larger weight deviation with a 64-token prompt (sharp
//! attention, and longer than the files' sliding windows).
//!
//! Without llama.cpp (CI), the files of the architectures kestrel matches are rebuilt in memory
//! from `fixtures/archs/skeletons.json` and llama.cpp's random number generator (`files.rs`): the
//! same metadata and the same weights, so llama.cpp's logits hold for them. With
//! `KESTREL_ARCHS_DIR` (`cargo xtask archs`), every file llama.cpp wrote is checked and the table
//! written (`KESTREL_ARCHS_TABLE`); `KESTREL_ARCHS_SKELETONS` rewrites the skeletons of the
//! architectures in `fixtures/archs/matching.txt` from those files.
//!
//! Every file found must either match llama.cpp (mean-free: KL divergence of the next-token
//! distributions ≤ 1e-4, or normalized MSE of the logits ≤ 1e-4 as llama.cpp's own test bounds
//! it, and the same argmax wherever llama.cpp's top-2 gap exceeds 1e-3) or be refused with an
//! error: a file kestrel runs with different results is a failure, whatever its architecture.
//! The files in `matching.txt` must match.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kestrel_generate::{logits_of_ids, LogitsOptions};
use kestrel_gguf::GgufModel;

#[path = "llama_archs/files.rs"]
mod files;

const KLD_MAX: f64 = 1e-4;
const NMSE_MAX: f64 = 1e-4;
const GAP_MIN: f32 = 1e-3;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs")
}

/// `KL(p_ref || p)` of the softmaxes of two logit rows, in f64.
fn kld(reference: &[f32], ours: &[f32]) -> f64 {
    let log_softmax = |x: &[f32]| {
        let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let lse = x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln() + m;
        x.iter().map(|&v| v as f64 - lse).collect::<Vec<f64>>()
    };
    let (lp, lq) = (log_softmax(reference), log_softmax(ours));
    lp.iter()
        .zip(&lq)
        .map(|(&a, &b)| a.exp() * (a - b))
        .sum::<f64>()
        .max(0.0)
}

/// `mse(ref, ours) / mse(ref, 0)`, as llama.cpp's test-llama-archs.
fn nmse(reference: &[f32], ours: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&a, &b) in reference.iter().zip(ours) {
        num += (a as f64 - b as f64).powi(2);
        den += (a as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// llama.cpp's top-2 gap.
fn top2_gap(x: &[f32]) -> f32 {
    let mut s: Vec<f32> = x.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    s.first().copied().unwrap_or(0.0) - s.get(1).copied().unwrap_or(f32::NEG_INFINITY)
}

enum Outcome {
    Match { kld: f64, nmse: f64 },
    Mismatch { kld: f64, nmse: f64, argmax: bool },
    Refused(String),
    NoReference(String),
}

fn check(model: Result<GgufModel, String>, prompt: &[u32], reference: Option<&[f32]>) -> Outcome {
    let run = || -> Result<Vec<f32>, String> {
        let model = model?;
        let opts = LogitsOptions {
            threads: 2,
            ..LogitsOptions::default()
        };
        let mut rows = logits_of_ids(&model, prompt, &opts).map_err(|e| e.to_string())?;
        rows.pop().ok_or_else(|| "no logits".to_string())
    };
    let ours = match run() {
        Ok(l) => l,
        Err(e) => return Outcome::Refused(e),
    };
    let Some(reference) = reference else {
        return Outcome::NoReference(format!("kestrel runs it ({} logits)", ours.len()));
    };
    if ours.len() != reference.len() {
        return Outcome::Mismatch {
            kld: f64::INFINITY,
            nmse: f64::INFINITY,
            argmax: false,
        };
    }
    let (k, n) = (kld(reference, &ours), nmse(reference, &ours));
    let argmax_ok = top2_gap(reference) <= GAP_MIN || argmax(reference) == argmax(&ours);
    if (k <= KLD_MAX || n <= NMSE_MAX) && argmax_ok && k.is_finite() {
        Outcome::Match { kld: k, nmse: n }
    } else {
        Outcome::Mismatch {
            kld: k,
            nmse: n,
            argmax: argmax_ok,
        }
    }
}

#[test]
fn random_weight_architectures_match_llama_cpp() {
    let dir = std::env::var_os("KESTREL_ARCHS_DIR").map(PathBuf::from);
    let text = std::fs::read_to_string(fixtures().join("golden.json")).expect("golden.json");
    let golden: serde_json::Value = serde_json::from_str(&text).expect("golden.json is JSON");
    let matching: Vec<String> = std::fs::read_to_string(fixtures().join("matching.txt"))
        .expect("matching.txt")
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let skeleton_path = fixtures().join("skeletons.json");
    if let (Some(dir), Some(out)) = (&dir, std::env::var_os("KESTREL_ARCHS_SKELETONS")) {
        let mut sk = BTreeMap::new();
        for stem in &matching {
            let m = GgufModel::open(dir.join("s1").join(format!("{stem}.gguf"))).expect("open");
            sk.insert(stem.clone(), files::skeleton_of(&m).expect("skeleton"));
        }
        std::fs::write(&out, files::skeletons_json(&sk)).expect("write skeletons");
    }
    let skeletons = files::read_skeletons(&skeleton_path);
    for stem in &matching {
        assert!(
            skeletons.contains_key(stem),
            "{stem} is in matching.txt but has no skeleton: run cargo xtask archs"
        );
    }

    // stem -> set -> outcome
    let mut table: BTreeMap<String, Vec<(String, Outcome)>> = BTreeMap::new();
    let mut failures = Vec::new();
    let sets = golden["sets"].as_object().expect("sets");
    for (key, set) in sets {
        let prompt: Vec<u32> = set["prompt"]
            .as_array()
            .expect("prompt")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let seed = set["seed"].as_u64().expect("seed");
        let stdev = set["stdev"].as_f64().expect("stdev") as f32;
        for (stem, rec) in set["files"].as_object().expect("files") {
            let must = matching.contains(stem);
            if let Some((base, variant)) = files::variant(stem) {
                // kestrel's variants of llama.cpp's files (golden logits by llama.cpp on the
                // bytes written here, `KESTREL_ARCHS_WRITE`), rebuilt in every mode.
                let sk = &skeletons[base];
                if let Some(out) = std::env::var_os("KESTREL_ARCHS_WRITE") {
                    let d = PathBuf::from(out).join(format!("s{key}"));
                    std::fs::create_dir_all(&d).expect("mkdir");
                    let bytes = variant.bytes(sk, seed, stdev);
                    std::fs::write(d.join(format!("{stem}.gguf")), bytes).expect("write");
                }
                let model = variant.model(sk, seed, stdev);
                let reference: Option<Vec<f32>> = rec["logits"].as_array().map(|a| {
                    a.iter()
                        .map(|v| v.as_f64().expect("logit") as f32)
                        .collect()
                });
                let outcome = check(Ok(model), &prompt, reference.as_deref());
                if !matches!(outcome, Outcome::Match { .. }) {
                    failures.push(format!("{stem} (set {key}): does not match llama.cpp"));
                }
                table
                    .entry(stem.clone())
                    .or_default()
                    .push((key.clone(), outcome));
                continue;
            }
            let model = match &dir {
                Some(dir) => {
                    let path = dir.join(format!("s{key}")).join(format!("{stem}.gguf"));
                    if !path.is_file() {
                        if must {
                            failures
                                .push(format!("{stem} (set {key}): {} is missing", path.display()));
                        }
                        continue;
                    }
                    GgufModel::open(&path).map_err(|e| e.to_string())
                }
                None => match skeletons.get(stem) {
                    Some(sk) => Ok(files::build(sk, seed, stdev)),
                    None => continue,
                },
            };
            let reference: Option<Vec<f32>> = rec["logits"].as_array().map(|a| {
                a.iter()
                    .map(|v| v.as_f64().expect("logit") as f32)
                    .collect()
            });
            let outcome = check(model, &prompt, reference.as_deref());
            match &outcome {
                Outcome::Match { .. } | Outcome::NoReference(_) => {}
                Outcome::Refused(_) if !must => {}
                Outcome::Refused(e) => {
                    failures.push(format!("{stem} (set {key}): refused: {e}"));
                }
                Outcome::Mismatch { kld, nmse, argmax } => failures.push(format!(
                    "{stem} (set {key}): runs but differs from llama.cpp: KLD {kld:.3e}, \
                     NMSE {nmse:.3e}, argmax {}",
                    if *argmax { "agrees" } else { "differs" }
                )),
            }
            table
                .entry(stem.clone())
                .or_default()
                .push((key.clone(), outcome));
        }
    }
    if let (Some(path), Some(_)) = (std::env::var_os("KESTREL_ARCHS_TABLE"), &dir) {
        let version = golden["llama_cpp"].as_str().unwrap_or("?");
        std::fs::write(&path, markdown(&table, version)).expect("write the table");
    }
    let matched = table
        .values()
        .filter(|v| v.iter().all(|(_, o)| matches!(o, Outcome::Match { .. })))
        .count();
    eprintln!(
        "{} files checked ({}): {matched} architectures match llama.cpp on every set",
        table.values().map(Vec::len).sum::<usize>(),
        if dir.is_some() {
            "llama.cpp's"
        } else {
            "rebuilt from skeletons"
        }
    );
    assert!(!table.is_empty(), "no file was checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn markdown(table: &BTreeMap<String, Vec<(String, Outcome)>>, version: &str) -> String {
    let mut s = format!(
        "# Architectures\n\n\
         kestrel on the random-weight file llama.cpp's `test-llama-archs` writes for each \
         architecture (vocabulary 128, 2 layers), against llama.cpp {version}'s logits on the same \
         file: the last position of a 16-token id prompt for seeds 1 and 2 (weights of deviation \
         0.1), and of a 64-token prompt for seed 3 at deviation 1 (sharp attention, longer than \
         the sliding windows). ✓: KL divergence ≤ 1e-4 (or normalized MSE ≤ 1e-4) and the same \
         argmax on every set; otherwise what kestrel says when it refuses the file. Generated by \
         `cargo xtask archs`; do not edit.\n\n\
         | file | status | max KLD | max NMSE |\n|---|---|---:|---:|\n"
    );
    for (stem, outcomes) in table {
        let all_match = outcomes
            .iter()
            .all(|(_, o)| matches!(o, Outcome::Match { .. }));
        let (mut kmax, mut nmax) = (0f64, 0f64);
        for (_, o) in outcomes {
            if let Outcome::Match { kld, nmse } | Outcome::Mismatch { kld, nmse, .. } = o {
                kmax = kmax.max(*kld);
                nmax = nmax.max(*nmse);
            }
        }
        let status = if all_match {
            "✓".to_string()
        } else {
            let (_, o) = outcomes
                .iter()
                .find(|(_, o)| !matches!(o, Outcome::Match { .. }))
                .expect("one differs");
            match o {
                Outcome::Refused(e) if e.starts_with("unsupported architecture") => {
                    "not supported yet".into()
                }
                Outcome::Refused(e) => format!("refused: {}", e.replace('|', "\\|")),
                Outcome::NoReference(e) => format!("no llama.cpp logits; {e}"),
                Outcome::Mismatch { .. } => "**differs from llama.cpp**".into(),
                Outcome::Match { .. } => unreachable!(),
            }
        };
        let num = |x: f64, shown: bool| {
            if shown {
                format!("{x:.1e}")
            } else {
                "".into()
            }
        };
        let shown = outcomes
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Match { .. } | Outcome::Mismatch { .. }));
        s.push_str(&format!(
            "| {stem} | {status} | {} | {} |\n",
            num(kmax, shown),
            num(nmax, shown)
        ));
    }
    s
}

/// MoE in a batch: 8 sequences of different lengths decoded together give each the greedy
/// tokens it gets alone (the batched == single invariant, through the expert grouping), on
/// llama.cpp's qwen3moe file (seed 1: near-uniform logits, so any numeric difference would flip
/// a token).
#[test]
fn moe_batched_decode_equals_single() {
    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    batched_equals_single(files::build(&skeletons["qwen3moe-moe"], 1, 0.1));
}

/// The same for DeepSeek with many heads, through the batch scheduler's paged caches: the latent
/// (keys-only) cache and the decompressed form's keys and values of different sizes.
#[test]
fn deepseek2_batched_decode_equals_single() {
    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    for stem in ["deepseek2-moe-h4", "deepseek2-moe-h4-kvb"] {
        let (base, v) = files::variant(stem).expect("variant");
        batched_equals_single(v.model(&skeletons[base], 1, 0.1));
    }
}

/// And for layers of different KV heads (each paged layer at its own width): deci's NAS layers,
/// some of which keep no cache at all, and OpenELM's, whose query heads differ too.
#[test]
fn per_layer_heads_batched_decode_equals_single() {
    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    let (base, v) = files::variant("deci-dense-nas").expect("variant");
    let model = v.model(&skeletons[base], 1, 0.1);
    let cfg = kestrel_arch::DecoderConfig::from_model(&model).expect("config");
    let layout = kestrel_generate::kv_layout(&cfg, kestrel_kv::KvDType::F16).expect("layout");
    // Attention in layers 0, 2 and 6 only (5 has no FFN and is left out).
    assert_eq!(
        (layout.n_layers, layout.layer_kv_heads.clone()),
        (3, vec![2, 1, 1])
    );
    batched_equals_single(model);
    let (base, v) = files::variant("openelm-dense-layers").expect("variant");
    batched_equals_single(v.model(&skeletons[base], 1, 0.1));
}

/// The state-space families (Mamba, Mamba-2, and the hybrids with attention: jamba,
/// granitehybrid, nemotron_h with and without experts (also latent ones), falcon-h1, LFM2) keep one recurrent state per sequence: sequences in a batch decode as each
/// does alone; a session continues from its state, and one cut back part of the way starts over
/// (a state cannot go back), giving a fresh prefill's logits; prompt-lookup speculation (which
/// returns the state to its checkpoint and runs the kept tokens again after a rejected draft)
/// gives greedy decoding's ids.
#[test]
fn mamba_states_follow_each_sequence() {
    use std::sync::Arc;

    use kestrel_generate::{Generator, GeneratorOptions, LookupOptions};

    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    let mut rejected = 0;
    for stem in [
        "mamba-dense",
        "mamba2-dense",
        "jamba-dense",
        "granitehybrid-dense",
        "nemotron_h-dense",
        "nemotron_h_moe-experts",
        "nemotron_h_moe-latent",
        "falcon-h1-dense",
        "lfm2-dense",
    ] {
        let build = |seed| match files::variant(stem) {
            Some((base, v)) => v.model(&skeletons[base], seed, 0.1),
            None => files::build(&skeletons[stem], seed, 0.1),
        };
        batched_equals_single(build(1));
        let opts = GeneratorOptions {
            threads: 2,
            ctx: 128,
            ..GeneratorOptions::default()
        };
        let model = Arc::new(build(2));
        let mut g = Generator::new(model, opts).expect("generator");
        let prompt: Vec<u32> = (0..24).map(|i| [5, 9, 17, 33, 64][i % 5]).collect();
        let fresh =
            |g: &mut Generator, n: usize| g.prefill(&prompt[..n]).expect("prefill").to_vec();
        let (l15, l20) = (fresh(&mut g, 15), fresh(&mut g, 20));
        let mut s = g.new_session().expect("session");
        g.prefill_in(&mut s, &prompt[..10]).expect("prefill");
        let cont = g
            .prefill_in(&mut s, &prompt[..20])
            .expect("continue")
            .to_vec();
        assert_eq!(argmax(&cont), argmax(&l20), "{stem}: continued");
        assert!(
            nmse(&l20, &cont) < 1e-8,
            "{stem}: continued {}",
            nmse(&l20, &cont)
        );
        let cut = g
            .prefill_in(&mut s, &prompt[..15])
            .expect("cut back")
            .to_vec();
        assert_eq!(cut, l15, "{stem}: cut back");
        assert_eq!(s.tokens(), &prompt[..15]);

        let plain = g
            .generate_ids(&prompt, 32, &mut |_| Ok(true))
            .expect("greedy");
        let (spec, stats) = g
            .generate_lookup(&prompt, 32, LookupOptions::default(), &mut |_| Ok(true))
            .expect("lookup");
        assert_eq!(spec.ids, plain.ids, "{stem}: {stats:?}");
        rejected += usize::from(stats.drafted > stats.accepted);
    }
    // The rollback path ran (not every family's greedy text rejects a draft).
    assert!(rejected >= 3, "{rejected} families rejected a draft");
}

/// NextN (multi-token prediction) blocks counted in `block_count` are not part of the forward
/// pass (llama.cpp runs them only as a draft): nemotron_h_moe with one more block declared NextN
/// gives the logits it gives without it.
#[test]
fn nextn_blocks_are_left_out() {
    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    let (base, v) = files::variant("nemotron_h_moe-experts").expect("variant");
    let plain = v.skeleton_of(&skeletons[base]);
    let with_mtp = files::with_nextn_block(&plain, "nemotron_h_moe");
    let prompt = [1, 5, 9, 17, 33, 65];
    assert_eq!(
        prefill_logits(&with_mtp, &prompt),
        prefill_logits(&plain, &prompt)
    );
}

/// Per-layer flags stored as booleans (as llama.cpp's converter writes granite_swa's
/// `attention.sliding_window_pattern`) mean what the integer arrays of test-llama-archs' files
/// mean.
#[test]
fn layer_flags_read_as_bools_or_integers() {
    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    let ints = &skeletons["granite_swa-dense"];
    let bools = files::with_bool_array(ints, "granite_swa.attention.sliding_window_pattern");
    let prompt: Vec<u32> = (0..48).map(|i| (i * 37 + 5) % 128).collect();
    assert_eq!(
        prefill_logits(&bools, &prompt),
        prefill_logits(ints, &prompt)
    );
}

/// The logits of `prompt` on `sk`'s file of seed 3 at deviation 1.
fn prefill_logits(sk: &files::Skeleton, prompt: &[u32]) -> Vec<f32> {
    use std::sync::Arc;

    use kestrel_generate::{Generator, GeneratorOptions};

    let opts = GeneratorOptions {
        threads: 2,
        ctx: 128,
        ..GeneratorOptions::default()
    };
    let model = Arc::new(files::build(sk, 3, 1.0));
    let mut g = Generator::new(model, opts).expect("generator");
    g.prefill(prompt).expect("prefill").to_vec()
}

fn batched_equals_single(model: GgufModel) {
    use std::sync::Arc;

    use kestrel_generate::{
        BatchOptions, BatchRequest, GenerateParams, Generator, GeneratorOptions,
    };

    let opts = GeneratorOptions {
        threads: 2,
        ctx: 128,
        ..GeneratorOptions::default()
    };
    let mut g = Generator::new(Arc::new(model), opts).expect("generator");
    let prompts: Vec<Vec<u32>> = (0..8u32)
        .map(|i| (0..3 + 5 * i).map(|j| (i * 31 + j * 7 + 1) % 128).collect())
        .collect();
    let n_new = 12;
    let single: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            g.generate_ids(p, n_new, &mut |_| Ok(true))
                .expect("single")
                .ids
        })
        .collect();
    let requests = prompts
        .iter()
        .map(|p| BatchRequest {
            prompt: p.clone(),
            params: GenerateParams::greedy(n_new),
        })
        .collect();
    let out = g
        .batch_generate(requests, &BatchOptions::default())
        .expect("batch");
    for (i, (want, got)) in single.iter().zip(&out).enumerate() {
        assert_eq!(&got.as_ref().expect("completion").ids, want, "sequence {i}");
    }
}

/// DeepSeek's latent cache holds what llama.cpp's does: per token and layer, the latent and the
/// shared rotated key part (512 + 64 values, no values), where the decompressed form caches every
/// head's keys and values (4 × (192 + 128) in the 4-head variant).
#[test]
fn deepseek2_caches_the_latent_only() {
    use kestrel_arch::DecoderConfig;
    use kestrel_kv::KvDType;
    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    let base = &skeletons["deepseek2-moe"];
    let bytes = |stem: &str| {
        let model = match files::variant(stem) {
            Some((_, v)) => v.model(base, 1, 0.1),
            None => files::build(base, 1, 0.1),
        };
        let cfg = DecoderConfig::from_model(&model).expect("config");
        let layout = kestrel_generate::kv_layout(&cfg, KvDType::F16).expect("layout");
        (layout.bytes_per_token(), cfg.n_layer)
    };
    for stem in ["deepseek2-moe", "deepseek2-moe-h4"] {
        let (b, n_layer) = bytes(stem);
        assert_eq!(b, n_layer * (512 + 64) * 2, "{stem}");
    }
    let (b, n_layer) = bytes("deepseek2-moe-h4-kvb");
    assert_eq!(b, n_layer * 4 * (192 + 128) * 2);
}

/// The architectures whose graph the CUDA plan refuses (`CudaPlan::check`, no GPU needed), with
/// the op it lacks: the list changes only on purpose. Every other architecture kestrel matches
/// llama.cpp on compiles for the GPU; `cuda_generate.rs` runs each there against the CPU.
const CUDA_REFUSED: &[(&str, &str)] = &[];

/// Which of the matching architectures the CUDA plan takes, checked on the graph alone (the
/// same check `CudaPlan::compile` makes before uploading anything).
#[test]
fn the_cuda_plan_takes_these_architectures() {
    use kestrel_arch::{build_decoder, DecoderConfig, Logits};
    use kestrel_graph::{CudaPlan, GraphError};
    let text = std::fs::read_to_string(fixtures().join("golden.json")).expect("golden.json");
    let golden: serde_json::Value = serde_json::from_str(&text).expect("golden.json is JSON");
    let set = &golden["sets"]["1"];
    let seed = set["seed"].as_u64().expect("seed");
    let stdev = set["stdev"].as_f64().expect("stdev") as f32;
    let skeletons = files::read_skeletons(&fixtures().join("skeletons.json"));
    let matching = std::fs::read_to_string(fixtures().join("matching.txt")).expect("matching");
    let mut refused: Vec<(String, String)> = Vec::new();
    let mut taken = 0;
    for stem in matching
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
    {
        let model = files::build(&skeletons[stem], seed, stdev);
        let cfg = DecoderConfig::from_model(&model).expect("config");
        let graph = build_decoder(&cfg, &model, Logits::Last).expect("graph");
        match CudaPlan::check(&graph) {
            Ok(()) => taken += 1,
            Err(GraphError::Unsupported { op, .. }) => refused.push((stem.to_string(), op.into())),
            Err(e) => panic!("{stem}: {e}"),
        }
    }
    eprintln!(
        "the CUDA plan takes {taken} of {} architectures; refused: {refused:?}",
        taken + refused.len()
    );
    let want: Vec<(String, String)> = CUDA_REFUSED
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(refused, want, "the architectures the CUDA plan refuses");
}
