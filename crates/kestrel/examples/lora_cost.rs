//! What a LoRA adapter costs per decoded token: the model with and without the adapter, loaded
//! side by side in one process and timed in alternation, so a machine whose speed drifts (a
//! shared VM) moves both alike:
//! `cargo run --release -p kestrel --example lora_cost -- MODEL ADAPTER [ROUNDS] [TOKENS]`.
//!
//! Each round decodes `TOKENS` tokens (default 64, after one prompt token) with each model in
//! turn, the order alternating; prints each round's ratio of time per token (adapter / none),
//! their median, and the ratio of the fastest rounds (interference only adds time).

use std::time::Instant;

use kestrel::{LoadOptions, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(model), Some(adapter)) = (args.next(), args.next()) else {
        return Err("usage: lora_cost MODEL ADAPTER [ROUNDS] [TOKENS]".into());
    };
    let rounds: usize = args.next().map_or(Ok(15), |v| v.parse())?;
    let tokens: usize = args.next().map_or(Ok(64), |v| v.parse())?;
    let opts = || LoadOptions {
        threads: 2,
        ctx: tokens + 1,
        ..LoadOptions::default()
    };
    let mut plain = Model::load_file(&model, opts())?;
    let mut adapted = Model::load_file(&model, opts().with_lora(&adapter, 1.0))?;
    let ids: Vec<u32> = (0..=tokens as u32).map(|i| 100 + i * 7).collect();
    let time = |m: &mut Model| -> Result<f64, kestrel::Error> {
        let g = m.generator_mut();
        let t = Instant::now();
        g.prefill(&ids[..1])?;
        for &id in &ids[1..] {
            g.step(id)?;
        }
        Ok(t.elapsed().as_secs_f64() / tokens as f64)
    };
    // Warm both (pages, plans, caches).
    time(&mut plain)?;
    time(&mut adapted)?;
    let mut ratios = Vec::with_capacity(rounds);
    let mut base = Vec::with_capacity(rounds);
    let mut with = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let (p, a) = if r % 2 == 0 {
            let p = time(&mut plain)?;
            (p, time(&mut adapted)?)
        } else {
            let a = time(&mut adapted)?;
            (time(&mut plain)?, a)
        };
        println!(
            "round {r}: {:.3} ms without, {:.3} ms with: +{:.1}%",
            p * 1e3,
            a * 1e3,
            (a / p - 1.0) * 100.0
        );
        ratios.push(a / p);
        base.push(p);
        with.push(a);
    }
    // The fastest round of each: interference only ever adds time.
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (bp, ba) = (fastest(&base), fastest(&with));
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "median of the rounds: {:.3} ms per token without, +{:.1}% with the adapter; \
         fastest rounds: {:.3} ms, +{:.1}% ({rounds} rounds of {tokens} tokens)",
        median(&mut base) * 1e3,
        (median(&mut ratios) - 1.0) * 100.0,
        bp * 1e3,
        (ba / bp - 1.0) * 100.0
    );
    Ok(())
}
