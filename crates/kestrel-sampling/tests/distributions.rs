//! Statistical checks: with a fixed seed and 100k draws, the empirical distribution of each
//! filtering stage matches the distribution its definition gives (computed independently here),
//! and tokens outside the kept set are never drawn.

use kestrel_sampling::{Sampler, SamplingConfig};

const DRAWS: usize = 100_000;

/// Distinct logits with a spread of probabilities.
fn synthetic_logits() -> Vec<f32> {
    (0..24)
        .map(|i| 3.0 - 0.37 * i as f32 + 0.05 * ((i * 7) % 5) as f32)
        .collect()
}

fn softmax(logits: &[f64]) -> Vec<f64> {
    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

/// Final distribution: softmax(logit / t) restricted to `keep`.
fn restricted(logits: &[f32], keep: &[usize], t: f64) -> Vec<f64> {
    let mut out = vec![0.0; logits.len()];
    let ls: Vec<f64> = keep.iter().map(|&i| f64::from(logits[i]) / t).collect();
    for (p, &i) in softmax(&ls).iter().zip(keep) {
        out[i] = *p;
    }
    out
}

fn order_desc(p: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..p.len()).collect();
    idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
    idx
}

fn check(cfg: SamplingConfig, expected: &[f64]) {
    let logits = synthetic_logits();
    let mut s = Sampler::new(&cfg, logits.len()).unwrap();
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..DRAWS {
        counts[s.sample(&mut logits.clone(), &[]).unwrap() as usize] += 1;
    }
    let mut chi2 = 0.0;
    let mut df = 0usize;
    for (i, (&c, &p)) in counts.iter().zip(expected).enumerate() {
        let f = c as f64 / DRAWS as f64;
        if p == 0.0 {
            assert_eq!(
                c, 0,
                "token {i} is outside the kept set but was drawn {c} times ({cfg:?})"
            );
            continue;
        }
        let sigma = (p * (1.0 - p) / DRAWS as f64).sqrt();
        assert!(
            (f - p).abs() < 5.0 * sigma + 1e-4,
            "token {i}: freq {f:.5} vs p {p:.5} ({cfg:?})"
        );
        chi2 += (c as f64 - p * DRAWS as f64).powi(2) / (p * DRAWS as f64);
        df += 1;
    }
    let df = df.saturating_sub(1) as f64;
    // chi-square with df degrees of freedom: mean df, sd sqrt(2 df); 6 sd is far past p = 1e-6
    assert!(
        chi2 < df + 6.0 * (2.0 * df).sqrt() + 10.0,
        "chi2 {chi2:.1} with {df} df ({cfg:?})"
    );
}

fn base(seed: u64) -> SamplingConfig {
    SamplingConfig {
        seed: Some(seed),
        ..Default::default()
    }
}

#[test]
fn plain_softmax_at_several_temperatures() {
    let l = synthetic_logits();
    let all: Vec<usize> = (0..l.len()).collect();
    for (seed, t) in [(1u64, 1.0f32), (2, 0.5), (3, 1.7)] {
        check(
            SamplingConfig {
                temperature: t,
                ..base(seed)
            },
            &restricted(&l, &all, f64::from(t)),
        );
    }
}

#[test]
fn top_k_matches_definition() {
    let l = synthetic_logits();
    let p = softmax(&l.iter().map(|&x| f64::from(x)).collect::<Vec<_>>());
    for (seed, k) in [(10u64, 1usize), (11, 5), (12, 12)] {
        let keep: Vec<usize> = order_desc(&p)[..k].to_vec();
        check(
            SamplingConfig {
                top_k: k,
                temperature: 0.9,
                ..base(seed)
            },
            &restricted(&l, &keep, 0.9),
        );
    }
}

#[test]
fn top_p_matches_definition() {
    let l = synthetic_logits();
    let p = softmax(&l.iter().map(|&x| f64::from(x)).collect::<Vec<_>>());
    for (seed, top_p) in [(20u64, 0.5f32), (21, 0.8), (22, 0.95)] {
        let mut keep = Vec::new();
        let mut cum = 0.0;
        for i in order_desc(&p) {
            keep.push(i);
            cum += p[i];
            if cum >= f64::from(top_p) {
                break;
            }
        }
        check(
            SamplingConfig {
                top_p,
                temperature: 1.2,
                ..base(seed)
            },
            &restricted(&l, &keep, 1.2),
        );
    }
}

#[test]
fn min_p_matches_definition() {
    let l = synthetic_logits();
    let p = softmax(&l.iter().map(|&x| f64::from(x)).collect::<Vec<_>>());
    let pmax = p.iter().cloned().fold(0.0, f64::max);
    for (seed, min_p) in [(30u64, 0.05f32), (31, 0.2), (32, 0.6)] {
        let keep: Vec<usize> = (0..p.len())
            .filter(|&i| p[i] >= f64::from(min_p) * pmax)
            .collect();
        check(
            SamplingConfig {
                min_p,
                ..base(seed)
            },
            &restricted(&l, &keep, 1.0),
        );
    }
}

#[test]
fn typical_p_matches_definition() {
    let l = synthetic_logits();
    let p = softmax(&l.iter().map(|&x| f64::from(x)).collect::<Vec<_>>());
    let h: f64 = p.iter().map(|&x| -x * x.ln()).sum();
    for (seed, typ) in [(40u64, 0.3f32), (41, 0.7)] {
        let mut idx: Vec<usize> = (0..p.len()).collect();
        idx.sort_by(|&a, &b| (-p[a].ln() - h).abs().total_cmp(&(-p[b].ln() - h).abs()));
        let mut keep = Vec::new();
        let mut cum = 0.0;
        for i in idx {
            keep.push(i);
            cum += p[i];
            if cum > f64::from(typ) {
                break;
            }
        }
        check(
            SamplingConfig {
                typical_p: typ,
                ..base(seed)
            },
            &restricted(&l, &keep, 1.0),
        );
    }
}

#[test]
fn chained_filters_follow_llama_cpp_order() {
    // top-k 10, then top-p 0.9 over the renormalized top 10, then min-p 0.1, then temperature.
    let l = synthetic_logits();
    let p = softmax(&l.iter().map(|&x| f64::from(x)).collect::<Vec<_>>());
    let k10: Vec<usize> = order_desc(&p)[..10].to_vec();
    let pk = restricted(&l, &k10, 1.0);
    let mut keep = Vec::new();
    let mut cum = 0.0;
    for i in order_desc(&pk) {
        keep.push(i);
        cum += pk[i];
        if cum >= 0.9 {
            break;
        }
    }
    let pmax = pk[keep[0]];
    keep.retain(|&i| pk[i] >= 0.1 * pmax);
    let cfg = SamplingConfig {
        top_k: 10,
        top_p: 0.9,
        min_p: 0.1,
        temperature: 0.7,
        ..base(50)
    };
    check(cfg, &restricted(&l, &keep, 0.7));
}

#[test]
fn same_seed_same_tokens_across_threads() {
    fn run() -> Vec<u32> {
        let cfg = SamplingConfig {
            top_k: 8,
            top_p: 0.9,
            temperature: 1.1,
            ..base(77)
        };
        let l = synthetic_logits();
        let mut s = Sampler::new(&cfg, l.len()).unwrap();
        (0..1000)
            .map(|_| s.sample(&mut l.clone(), &[]).unwrap())
            .collect::<Vec<u32>>()
    }
    let here = run();
    let threads: Vec<_> = (0..4).map(|_| std::thread::spawn(run)).collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), here);
    }
}
