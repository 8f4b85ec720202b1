//! `Metrics`: counters the engine and the handlers update, rendered as Prometheus text at
//! `GET /metrics` (requests by endpoint and status, tokens, queue depth, KV blocks, throughput,
//! time-to-first-token histogram).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the time-to-first-token histogram's buckets.
pub const TTFT_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Server-wide counters and gauges.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests answered, by (endpoint, status).
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// Generation requests accepted and not yet finished (queued or running), counted per
    /// sequence (`n` choices count `n`).
    pub(crate) inflight: AtomicUsize,
    pub(crate) queued: AtomicUsize,
    pub(crate) running: AtomicUsize,
    pub(crate) kv_blocks_total: AtomicUsize,
    pub(crate) kv_blocks_free: AtomicUsize,
    pub(crate) kv_blocks_cached: AtomicUsize,
    pub(crate) prefix_hit_blocks: AtomicU64,
    pub(crate) prefix_miss_blocks: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) cached_tokens: AtomicU64,
    pub(crate) generated_tokens: AtomicU64,
    pub(crate) sequences_done: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) steps: AtomicU64,
    pub(crate) busy_nanos: AtomicU64,
    /// f64 bits: the last finished sequence's prefill and decode tok/s.
    pub(crate) last_prefill_tok_s: AtomicU64,
    pub(crate) last_decode_tok_s: AtomicU64,
    ttft: Mutex<Histogram>,
}

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; TTFT_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Metrics {
    /// Count one answered request.
    pub fn count_request(&self, endpoint: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((endpoint.to_string(), status)).or_default() += 1;
        }
    }

    /// Requests answered so far with `status` at `endpoint`.
    pub fn requests(&self, endpoint: &str, status: u16) -> u64 {
        self.requests
            .lock()
            .ok()
            .and_then(|m| m.get(&(endpoint.to_string(), status)).copied())
            .unwrap_or(0)
    }

    /// Record a time to first token.
    pub fn observe_ttft(&self, t: Duration) {
        let s = t.as_secs_f64();
        if let Ok(mut h) = self.ttft.lock() {
            for (i, &b) in TTFT_BUCKETS.iter().enumerate() {
                if s <= b {
                    h.counts[i] += 1;
                }
            }
            h.count += 1;
            h.sum += s;
        }
    }

    /// KV blocks in use (held by sequences or the prefix cache).
    pub fn kv_blocks_used(&self) -> usize {
        self.kv_blocks_total
            .load(Relaxed)
            .saturating_sub(self.kv_blocks_free.load(Relaxed))
    }

    /// Sequences queued or running.
    pub fn inflight(&self) -> usize {
        self.inflight.load(Relaxed)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let mut family = |name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            name.to_string()
        };
        let _ = family(
            "kestrel_requests_total",
            "counter",
            "HTTP requests answered.",
        );
        let mut lines = String::new();
        if let Ok(m) = self.requests.lock() {
            for ((ep, code), n) in m.iter() {
                let _ = writeln!(
                    lines,
                    "kestrel_requests_total{{endpoint=\"{ep}\",code=\"{code}\"}} {n}"
                );
            }
        }
        o.push_str(&lines);
        let f = |v: &AtomicU64| f64::from_bits(v.load(Relaxed));
        let gauges: [(&str, &str, &str, f64); 17] = [
            (
                "kestrel_queue_depth",
                "gauge",
                "Sequences waiting for admission.",
                self.queued.load(Relaxed) as f64,
            ),
            (
                "kestrel_running_sequences",
                "gauge",
                "Sequences in the running batch.",
                self.running.load(Relaxed) as f64,
            ),
            (
                "kestrel_inflight_sequences",
                "gauge",
                "Sequences accepted and not finished.",
                self.inflight.load(Relaxed) as f64,
            ),
            (
                "kestrel_kv_blocks_total",
                "gauge",
                "KV blocks in the pool.",
                self.kv_blocks_total.load(Relaxed) as f64,
            ),
            (
                "kestrel_kv_blocks_used",
                "gauge",
                "KV blocks held by sequences or the prefix cache.",
                self.kv_blocks_used() as f64,
            ),
            (
                "kestrel_kv_blocks_cached",
                "gauge",
                "KV blocks held only by the prefix cache.",
                self.kv_blocks_cached.load(Relaxed) as f64,
            ),
            (
                "kestrel_prefix_cache_hit_blocks_total",
                "counter",
                "Prompt blocks found in the prefix cache.",
                self.prefix_hit_blocks.load(Relaxed) as f64,
            ),
            (
                "kestrel_prefix_cache_miss_blocks_total",
                "counter",
                "Prompt blocks not found in the prefix cache.",
                self.prefix_miss_blocks.load(Relaxed) as f64,
            ),
            (
                "kestrel_prompt_tokens_total",
                "counter",
                "Prompt tokens of finished sequences.",
                self.prompt_tokens.load(Relaxed) as f64,
            ),
            (
                "kestrel_cached_prompt_tokens_total",
                "counter",
                "Prompt tokens reused from the prefix cache.",
                self.cached_tokens.load(Relaxed) as f64,
            ),
            (
                "kestrel_generated_tokens_total",
                "counter",
                "Tokens generated.",
                self.generated_tokens.load(Relaxed) as f64,
            ),
            (
                "kestrel_sequences_total",
                "counter",
                "Sequences finished (completed, stopped or cancelled).",
                self.sequences_done.load(Relaxed) as f64,
            ),
            (
                "kestrel_cancelled_sequences_total",
                "counter",
                "Sequences cancelled (client gone, timeout).",
                self.cancelled.load(Relaxed) as f64,
            ),
            (
                "kestrel_engine_steps_total",
                "counter",
                "Batched forward passes run.",
                self.steps.load(Relaxed) as f64,
            ),
            (
                "kestrel_engine_busy_seconds_total",
                "counter",
                "Seconds spent in forward passes and sampling.",
                self.busy_nanos.load(Relaxed) as f64 / 1e9,
            ),
            (
                "kestrel_prefill_tokens_per_second",
                "gauge",
                "Prefill speed of the last finished sequence.",
                f(&self.last_prefill_tok_s),
            ),
            (
                "kestrel_decode_tokens_per_second",
                "gauge",
                "Decode speed of the last finished sequence.",
                f(&self.last_decode_tok_s),
            ),
        ];
        for (name, kind, help, v) in gauges {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        }
        let name = "kestrel_time_to_first_token_seconds";
        let _ = writeln!(
            o,
            "# HELP {name} Time from a request's arrival to its first token.\n# TYPE {name} histogram"
        );
        if let Ok(h) = self.ttft.lock() {
            for (i, b) in TTFT_BUCKETS.iter().enumerate() {
                let _ = writeln!(o, "{name}_bucket{{le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(o, "{name}_sum {}\n{name}_count {}", h.sum, h.count);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histogram() {
        let m = Metrics::default();
        m.count_request("/v1/chat/completions", 200);
        m.count_request("/v1/chat/completions", 200);
        m.count_request("/v1/chat/completions", 400);
        m.observe_ttft(Duration::from_millis(70));
        m.observe_ttft(Duration::from_secs(3));
        let t = m.render();
        assert!(
            t.contains("kestrel_requests_total{endpoint=\"/v1/chat/completions\",code=\"200\"} 2")
        );
        assert!(t.contains("code=\"400\"} 1"));
        assert!(t.contains("kestrel_time_to_first_token_seconds_bucket{le=\"0.05\"} 0"));
        assert!(t.contains("kestrel_time_to_first_token_seconds_bucket{le=\"0.1\"} 1"));
        assert!(t.contains("kestrel_time_to_first_token_seconds_bucket{le=\"5\"} 2"));
        assert!(t.contains("kestrel_time_to_first_token_seconds_count 2"));
        assert_eq!(m.requests("/v1/chat/completions", 200), 2);
    }
}
