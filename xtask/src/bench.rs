//! `cargo xtask bench`: `kestrel bench` on the test models and, when `LLAMA_BENCH` names a
//! llama-bench binary, llama-bench with the same settings, interleaved (kestrel, llama.cpp,
//! kestrel, llama.cpp, ...) so both see the same machine noise; then a table of medians and the
//! ratio kestrel / llama.cpp per test.
//!
//! Each round runs one `kestrel bench --json` and one `llama-bench -o json` (each with its own
//! warm-up and `-r 1`); the median is over `--rounds` rounds.

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
}

/// One test's tok/s from one run, keyed by (n_prompt, n_gen).
type Samples = Vec<((u64, u64), f64)>;

fn parse_runs(json: &str) -> Result<Samples> {
    let v: serde_json::Value =
        serde_json::from_str(json).context("the benchmark did not print a JSON array")?;
    let arr = v
        .as_array()
        .context("the benchmark's JSON is not an array")?;
    let mut out = Vec::new();
    for t in arr {
        let np = t["n_prompt"].as_u64().context("no n_prompt")?;
        let ng = t["n_gen"].as_u64().context("no n_gen")?;
        let ts = t["avg_ts"].as_f64().context("no avg_ts")?;
        out.push(((np, ng), ts));
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
            .filter(|m| !m.heavy && !m.encoder)
            .collect()
    } else {
        o.models
            .iter()
            .map(|n| models::find(n))
            .collect::<Result<_>>()?
    };
    let llama: Option<PathBuf> = std::env::var_os("LLAMA_BENCH").map(PathBuf::from);
    match &llama {
        Some(p) => println!(
            "==> bench: interleaving with llama-bench at {}",
            p.display()
        ),
        None => println!("==> bench: LLAMA_BENCH not set: kestrel only"),
    }
    println!(
        "==> bench: {} rounds, {} threads, pp{} / tg{}",
        o.rounds, o.threads, o.n_prompt, o.n_gen
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
        let mut ours: Vec<((u64, u64), Vec<f64>)> = Vec::new();
        let mut theirs: Vec<((u64, u64), Vec<f64>)> = Vec::new();
        let push = |acc: &mut Vec<((u64, u64), Vec<f64>)>, s: Samples| {
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
            println!(
                "==> bench: {} round {}/{} done",
                m.name,
                round + 1,
                o.rounds
            );
        }
        for (key, vs) in &mut ours {
            let test = if key.0 > 0 {
                format!("pp{}", key.0)
            } else {
                format!("tg{}", key.1)
            };
            let k = median(vs);
            let l = theirs
                .iter_mut()
                .find(|(kk, _)| kk == key)
                .map(|(_, v)| median(v));
            let (ls, ratio) = match l {
                Some(l) => (format!("{l:.2}"), format!("{:.2}", k / l)),
                None => ("-".into(), "-".into()),
            };
            table.push_str(&format!(
                "| {} | {test} | {k:.2} | {ls} | {ratio} |\n",
                m.file
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
                    {"n_prompt": 0, "n_gen": 128, "avg_ts": 99.0}]"#;
        assert_eq!(
            parse_runs(j).unwrap(),
            vec![((512, 0), 300.5), ((0, 128), 99.0)]
        );
        assert!(parse_runs("{}").is_err());
        assert!(parse_runs("[{\"n_prompt\": 1}]").is_err());
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
