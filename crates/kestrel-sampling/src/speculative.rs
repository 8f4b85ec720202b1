//! Speculative sampling's acceptance rule (Leviathan et al. 2023; Chen et al. 2023): a token
//! `x` drafted from distribution `q` is kept with probability `min(1, p(x) / q(x))` under the
//! target's distribution `p`; on rejection the replacement is drawn from the residual
//! `max(0, p - q)`, renormalized. The emitted token is then distributed exactly as `p`,
//! whatever `q` is. Distributions are sparse `(id, probability)` lists.

use crate::Sampler;

fn prob(d: &[(u32, f32)], id: u32) -> f32 {
    d.iter().find(|x| x.0 == id).map_or(0.0, |x| x.1)
}

/// One verification: `Ok(())` when the drafted `x` is kept, `Err(replacement)` otherwise
/// (drawn from the residual with `rng`). `residual` is a reused buffer.
pub fn accept_or_resample(
    p: &[(u32, f32)],
    q: &[(u32, f32)],
    x: u32,
    rng: &mut Sampler,
    residual: &mut Vec<(u32, f32)>,
) -> Result<(), u32> {
    let (px, qx) = (prob(p, x), prob(q, x));
    if qx > 0.0 && rng.uniform() < f64::from((px / qx).min(1.0)) {
        return Ok(());
    }
    residual.clear();
    residual.extend(p.iter().map(|&(id, pi)| (id, (pi - prob(q, id)).max(0.0))));
    // p == q up to rounding leaves no mass: fall back to p itself
    let r = rng
        .draw_weighted(residual)
        .or_else(|| rng.draw_weighted(p))
        .unwrap_or(x);
    Err(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SamplingConfig;

    /// The emitted token (the draft's when kept, the residual draw otherwise) follows `p`.
    #[test]
    fn emitted_tokens_follow_the_target_distribution() {
        let p = vec![(0, 0.5), (1, 0.3), (2, 0.2)];
        for q in [
            vec![(0u32, 0.1f32), (1, 0.1), (2, 0.8)],
            vec![(1, 1.0)], // a deterministic draft (prompt lookup)
            p.clone(),
        ] {
            let mut rng = Sampler::new(
                &SamplingConfig {
                    seed: Some(9),
                    ..Default::default()
                },
                3,
            )
            .unwrap();
            let mut draft_rng = Sampler::new(
                &SamplingConfig {
                    seed: Some(10),
                    ..Default::default()
                },
                3,
            )
            .unwrap();
            let mut counts = [0usize; 3];
            let mut buf = Vec::new();
            let n = 60_000;
            for _ in 0..n {
                let x = draft_rng.draw_weighted(&q).unwrap();
                let t = match accept_or_resample(&p, &q, x, &mut rng, &mut buf) {
                    Ok(()) => x,
                    Err(r) => r,
                };
                counts[t as usize] += 1;
            }
            for (i, &(_, pi)) in p.iter().enumerate() {
                let f = counts[i] as f64 / n as f64;
                assert!(
                    (f - f64::from(pi)).abs() < 0.01,
                    "q {q:?}: token {i} at {f}, want {pi}"
                );
            }
        }
    }

    #[test]
    fn equal_distributions_always_accept() {
        let p = vec![(0, 0.25), (1, 0.75)];
        let mut rng = Sampler::new(
            &SamplingConfig {
                seed: Some(1),
                ..Default::default()
            },
            2,
        )
        .unwrap();
        let mut buf = Vec::new();
        for x in [0, 1] {
            for _ in 0..100 {
                assert_eq!(accept_or_resample(&p, &p, x, &mut rng, &mut buf), Ok(()));
            }
        }
    }
}
