//! llama-perplexity's log-probability file (`--kl-divergence-base`), read and written
//! row by row so a 262k-vocabulary file (134 MB a 512-token window) is never held whole.
//!
//! Layout, all little-endian, as `tools/perplexity/perplexity.cpp` writes it:
//! - `"_logits_"` (8 bytes), `n_ctx` (u32), `n_vocab` (i32), `n_chunk` (i32);
//! - the evaluated tokens: `n_ctx · n_chunk` i32 (as in the text, the first of each window not
//!   replaced by BOS);
//! - per window, one row for each scored position (`n_ctx - 1 - n_ctx/2` rows, the second half of
//!   the window but its last position): `scale` (f32), `min_log_prob` (f32), then `n_vocab`
//!   u16 padded to an even count; a log-probability is `scale · q + min_log_prob`, and values
//!   more than 16 below the row's largest logit are stored as 0 (i.e. `min_log_prob`).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::GenerateError;

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"_logits_";
/// Bytes before the tokens: magic, n_ctx, n_vocab, n_chunk.
const HEADER_BYTES: u64 = 8 + 4 + 4 + 4;
/// Largest window accepted from a file (llama.cpp's contexts are far smaller in practice).
const MAX_CTX: u32 = 1 << 20;
/// Largest vocabulary accepted from a file.
const MAX_VOCAB: u32 = 1 << 24;

fn bad(reason: String) -> GenerateError {
    GenerateError::LogProbFile(reason)
}

fn io(what: &Path, source: std::io::Error) -> GenerateError {
    GenerateError::Io {
        what: what.display().to_string(),
        source,
    }
}

/// u16 values in one row (the vocabulary rounded up to even, plus the two f32 of the prologue).
pub(crate) fn row_u16(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// Scored positions in a window of `n_ctx`: from `n_ctx/2` to `n_ctx - 2`.
pub(crate) fn scored_rows(n_ctx: usize) -> usize {
    n_ctx - 1 - n_ctx / 2
}

/// What a log-probability file holds, from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogProbHeader {
    /// Window length in tokens.
    pub n_ctx: usize,
    /// Vocabulary size of the model that wrote it.
    pub n_vocab: usize,
    /// Windows in the file.
    pub n_chunk: usize,
}

impl LogProbHeader {
    /// The file's size in bytes for this header.
    pub fn file_bytes(&self) -> u64 {
        let tokens = (self.n_ctx as u64) * (self.n_chunk as u64) * 4;
        let rows = (self.n_chunk as u64) * (scored_rows(self.n_ctx) as u64);
        HEADER_BYTES + tokens + rows * (row_u16(self.n_vocab) as u64) * 2
    }
}

/// One row as stored: the scale, the smallest log-probability and the vocabulary's quantized
/// log-probabilities.
#[derive(Clone, Debug, Default)]
pub struct LogProbRow {
    /// Step between two quantized values.
    pub scale: f32,
    /// The log-probability a 0 stands for.
    pub min_log_prob: f32,
    /// One value per vocabulary entry (the padding dropped).
    pub q: Vec<u16>,
}

impl LogProbRow {
    /// The log-probability of token `i` as the file gives it (`scale · q + min_log_prob`, in
    /// f32 as llama.cpp computes it). Panics if `i` is past the vocabulary.
    pub fn log_prob(&self, i: usize) -> f32 {
        self.scale * self.q[i] as f32 + self.min_log_prob
    }
}

/// Reads a log-probability file: the header and tokens at once, then rows one at a time.
pub struct LogProbReader<R> {
    inner: R,
    header: LogProbHeader,
    tokens: Vec<u32>,
    raw: Vec<u8>,
    rows_read: u64,
}

impl LogProbReader<BufReader<File>> {
    /// Opens `path`, checks its header, its size and its tokens.
    ///
    /// # Errors
    /// `Io` if it cannot be read, `LogProbFile` if it is not a log-probability file or its size
    /// does not match its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GenerateError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| io(path, e))?;
        let len = file.metadata().map_err(|e| io(path, e))?.len();
        LogProbReader::new(BufReader::with_capacity(1 << 20, file), len)
            .map_err(|e| with_path(path, e))
    }
}

fn with_path(path: &Path, e: GenerateError) -> GenerateError {
    match e {
        GenerateError::LogProbFile(reason) => {
            GenerateError::LogProbFile(format!("{}: {reason}", path.display()))
        }
        other => other,
    }
}

fn read_u32(r: &mut impl Read) -> Result<u32, GenerateError> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)
        .map_err(|e| bad(format!("header cut short: {e}")))?;
    Ok(u32::from_le_bytes(b))
}

impl<R: Read> LogProbReader<R> {
    /// Reads the header and the tokens from `inner`, whose total length is `len` bytes (the
    /// header's sizes are checked against it before anything they size is allocated).
    ///
    /// # Errors
    /// `LogProbFile` for a wrong magic, sizes out of range or not matching `len`, a token past
    /// the vocabulary, or a read that fails.
    pub fn new(mut inner: R, len: u64) -> Result<Self, GenerateError> {
        let mut magic = [0u8; 8];
        inner.read_exact(&mut magic).map_err(|_| {
            bad("does not look like a file of log-probabilities (too short)".into())
        })?;
        if &magic != MAGIC {
            return Err(bad(
                "does not look like a file of log-probabilities (no \"_logits_\" at its start)"
                    .into(),
            ));
        }
        let n_ctx = read_u32(&mut inner)?;
        let n_vocab = read_u32(&mut inner)?;
        let n_chunk = read_u32(&mut inner)?;
        if !(4..=MAX_CTX).contains(&n_ctx) {
            return Err(bad(format!(
                "window of {n_ctx} tokens, expected 4..={MAX_CTX}"
            )));
        }
        if n_vocab == 0 || n_vocab > MAX_VOCAB {
            return Err(bad(format!(
                "vocabulary of {n_vocab}, expected 1..={MAX_VOCAB}"
            )));
        }
        if n_chunk == 0 || n_chunk > i32::MAX as u32 {
            return Err(bad(format!("{n_chunk} windows")));
        }
        let header = LogProbHeader {
            n_ctx: n_ctx as usize,
            n_vocab: n_vocab as usize,
            n_chunk: n_chunk as usize,
        };
        let want = header.file_bytes();
        if want != len {
            return Err(bad(format!(
                "{len} bytes, but a file of {n_chunk} windows of {n_ctx} tokens over a vocabulary of {n_vocab} has {want}"
            )));
        }
        let n_tokens = header.n_ctx * header.n_chunk;
        let mut raw = vec![0u8; n_tokens * 4];
        inner
            .read_exact(&mut raw)
            .map_err(|e| bad(format!("tokens cut short: {e}")))?;
        let mut tokens = Vec::with_capacity(n_tokens);
        for (i, b) in raw.chunks_exact(4).enumerate() {
            let t = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if t < 0 || t as u32 >= n_vocab {
                return Err(bad(format!(
                    "token {i} is {t}, outside the vocabulary of {n_vocab}"
                )));
            }
            tokens.push(t as u32);
        }
        raw.clear();
        raw.resize(row_u16(header.n_vocab) * 2, 0);
        Ok(LogProbReader {
            inner,
            header,
            tokens,
            raw,
            rows_read: 0,
        })
    }

    /// The header.
    pub fn header(&self) -> LogProbHeader {
        self.header
    }

    /// The evaluated tokens, `n_ctx · n_chunk` of them.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Reads the next row into `row` (its `q` resized to the vocabulary).
    ///
    /// # Errors
    /// `LogProbFile` past the last row or if the read fails.
    pub fn read_row(&mut self, row: &mut LogProbRow) -> Result<(), GenerateError> {
        let total = (self.header.n_chunk * scored_rows(self.header.n_ctx)) as u64;
        if self.rows_read >= total {
            return Err(bad(format!("all {total} rows were read already")));
        }
        self.inner
            .read_exact(&mut self.raw)
            .map_err(|e| bad(format!("row {} cut short: {e}", self.rows_read)))?;
        self.rows_read += 1;
        let f = |i: usize| {
            f32::from_le_bytes([
                self.raw[i],
                self.raw[i + 1],
                self.raw[i + 2],
                self.raw[i + 3],
            ])
        };
        row.scale = f(0);
        row.min_log_prob = f(4);
        if !row.scale.is_finite() || !row.min_log_prob.is_finite() {
            return Err(bad(format!(
                "row {}: scale {} and minimum {} are not finite",
                self.rows_read - 1,
                row.scale,
                row.min_log_prob
            )));
        }
        row.q.clear();
        row.q.extend(
            self.raw[8..8 + 2 * self.header.n_vocab]
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        Ok(())
    }
}

/// Writes a log-probability file: the header and tokens at once, then one row per scored
/// position, in llama-perplexity's quantization.
pub struct LogProbWriter<W: Write> {
    out: W,
    n_vocab: usize,
    rows_left: u64,
    raw: Vec<u8>,
}

impl LogProbWriter<BufWriter<File>> {
    /// Creates `path` (replacing it) for `n_chunk` windows of `n_ctx` of `tokens`.
    ///
    /// # Errors
    /// `Io` if it cannot be written; `InvalidOption` as for [`LogProbWriter::new`].
    pub fn create(
        path: impl AsRef<Path>,
        n_ctx: usize,
        n_vocab: usize,
        tokens: &[u32],
    ) -> Result<Self, GenerateError> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| io(path, e))?;
        LogProbWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            n_ctx,
            n_vocab,
            tokens,
        )
    }
}

impl<W: Write> LogProbWriter<W> {
    /// Writes the header and `tokens` (whole windows of `n_ctx`: their count is `n_chunk`).
    ///
    /// # Errors
    /// `InvalidOption` if `tokens` is not a whole number of windows or a size is out of range,
    /// `Io` if the write fails.
    pub fn new(
        mut out: W,
        n_ctx: usize,
        n_vocab: usize,
        tokens: &[u32],
    ) -> Result<Self, GenerateError> {
        let invalid = |reason: String| GenerateError::InvalidOption {
            name: "kl-divergence-base",
            reason,
        };
        if n_ctx < 4
            || n_ctx > MAX_CTX as usize
            || tokens.is_empty()
            || !tokens.len().is_multiple_of(n_ctx)
        {
            return Err(invalid(format!(
                "{} tokens are not whole windows of {n_ctx}",
                tokens.len()
            )));
        }
        if n_vocab == 0 || n_vocab > MAX_VOCAB as usize {
            return Err(invalid(format!("vocabulary of {n_vocab}")));
        }
        let n_chunk = tokens.len() / n_ctx;
        let mut head = Vec::with_capacity(HEADER_BYTES as usize + tokens.len() * 4);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(n_ctx as u32).to_le_bytes());
        head.extend_from_slice(&(n_vocab as u32).to_le_bytes());
        head.extend_from_slice(&(n_chunk as u32).to_le_bytes());
        for &t in tokens {
            head.extend_from_slice(&t.to_le_bytes());
        }
        let werr = |e| GenerateError::Io {
            what: "log-probability file".into(),
            source: e,
        };
        out.write_all(&head).map_err(werr)?;
        Ok(LogProbWriter {
            out,
            n_vocab,
            rows_left: (n_chunk * scored_rows(n_ctx)) as u64,
            raw: vec![0u8; row_u16(n_vocab) * 2],
        })
    }

    /// Quantizes and writes the row of `logits` (one per vocabulary entry) as llama.cpp's
    /// `log_softmax` does; returns the negative log-likelihood of `target`.
    ///
    /// # Errors
    /// `InvalidOption` for a wrong length, a target past the vocabulary or a row too many;
    /// `Io` if the write fails.
    pub fn write_row(&mut self, logits: &[f32], target: u32) -> Result<f64, GenerateError> {
        let target = target as usize;
        if logits.len() != self.n_vocab || target >= self.n_vocab || self.rows_left == 0 {
            return Err(GenerateError::InvalidOption {
                name: "kl-divergence-base",
                reason: format!(
                    "row of {} logits (vocabulary {}), target {target}, {} rows left",
                    logits.len(),
                    self.n_vocab,
                    self.rows_left
                ),
            });
        }
        let nll = quantize_row(logits, target, &mut self.raw);
        self.out
            .write_all(&self.raw)
            .map_err(|e| GenerateError::Io {
                what: "log-probability file".into(),
                source: e,
            })?;
        self.rows_left -= 1;
        Ok(nll)
    }

    /// Flushes the file; an error if rows are missing.
    ///
    /// # Errors
    /// `InvalidOption` if fewer rows were written than the header promises, `Io` if the flush
    /// fails.
    pub fn finish(mut self) -> Result<W, GenerateError> {
        if self.rows_left != 0 {
            return Err(GenerateError::InvalidOption {
                name: "kl-divergence-base",
                reason: format!("{} rows were never written", self.rows_left),
            });
        }
        self.out.flush().map_err(|e| GenerateError::Io {
            what: "log-probability file".into(),
            source: e,
        })?;
        Ok(self.out)
    }
}

/// ggml's `nearest_int`: round half to even through the float mantissa (inputs below 2^22).
fn nearest_int(v: f32) -> i32 {
    let i = (v + 12_582_912.0).to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// llama.cpp's `log_softmax` that writes a row: the bytes of `[scale, min_log_prob, q...]` into
/// `raw` (padding zeroed), the target's negative log-likelihood returned.
fn quantize_row(logits: &[f32], target: usize, raw: &mut [u8]) -> f64 {
    let mut max_logit = logits[0];
    let mut min_logit = logits[0];
    for &l in &logits[1..] {
        max_logit = max_logit.max(l);
        min_logit = min_logit.min(l);
    }
    min_logit = min_logit.max(max_logit - 16.0);
    let sum_exp: f64 = logits.iter().map(|&l| (l - max_logit).exp() as f64).sum();
    let log_sum_exp = sum_exp.ln() as f32;
    let min_log_prob = min_logit - max_logit - log_sum_exp;
    let scale = (max_logit - min_logit) / 65535.0;
    raw[0..4].copy_from_slice(&scale.to_le_bytes());
    raw[4..8].copy_from_slice(&min_log_prob.to_le_bytes());
    raw[8..].fill(0);
    if scale != 0.0 {
        let inv_scale = 1.0 / scale;
        for (&l, out) in logits.iter().zip(raw[8..].chunks_exact_mut(2)) {
            let q = if l > min_logit {
                nearest_int(inv_scale * (l - min_logit)) as u16
            } else {
                0
            };
            out.copy_from_slice(&q.to_le_bytes());
        }
    }
    (max_logit + log_sum_exp - logits[target]) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 20_000) as f32 / 1000.0 - 10.0
            })
            .collect()
    }

    #[test]
    fn a_written_file_reads_back_within_its_quantization_step() {
        let (n_ctx, n_vocab) = (8, 37);
        let tokens: Vec<u32> = (0..16).map(|i| (i * 5) % 37).collect();
        let mut w = LogProbWriter::new(Vec::new(), n_ctx, n_vocab, &tokens).unwrap();
        let rows: Vec<Vec<f32>> = (0..6).map(|r| logits(n_vocab, r)).collect();
        for (r, row) in rows.iter().enumerate() {
            let nll = w.write_row(row, tokens[r]).unwrap();
            assert!(nll > 0.0);
        }
        assert!(
            w.write_row(&rows[0], 0).is_err(),
            "a row past the header's count"
        );
        let bytes = w.finish().unwrap();
        let head = LogProbHeader {
            n_ctx,
            n_vocab,
            n_chunk: 2,
        };
        assert_eq!(bytes.len() as u64, head.file_bytes());
        let mut r = LogProbReader::new(&bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(r.header(), head);
        assert_eq!(r.tokens(), &tokens[..]);
        let mut row = LogProbRow::default();
        for l in &rows {
            r.read_row(&mut row).unwrap();
            let max = l.iter().fold(f32::MIN, |m, &x| m.max(x)) as f64;
            let lse = max + l.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
            for (i, &x) in l.iter().enumerate() {
                let want = x as f64 - lse;
                if want > max - lse - 16.0 + 1e-3 {
                    let got = row.log_prob(i) as f64;
                    assert!((got - want).abs() <= row.scale as f64, "{got} vs {want}");
                }
            }
        }
        assert!(r.read_row(&mut row).is_err(), "past the last row");
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let tokens = [1u32, 2, 3, 4];
        let mut w = LogProbWriter::new(Vec::new(), 4, 5, &tokens).unwrap();
        w.write_row(&[0.0, 1.0, 2.0, 3.0, 4.0], 2).unwrap();
        let good = w.finish().unwrap();
        let len = good.len() as u64;
        assert!(LogProbReader::new(&good[..], len).is_ok());
        let err = |b: &[u8], len: u64| match LogProbReader::new(b, len) {
            Err(GenerateError::LogProbFile(r)) => r,
            other => panic!("{:?}", other.map(|r| r.header())),
        };
        let mut wrong = good.clone();
        wrong[0] = b'x';
        assert!(err(&wrong, len).contains("_logits_"));
        assert!(err(&good, len - 1).contains("bytes"));
        assert!(err(&good[..10], 10).contains("cut short"));
        let mut huge = good.clone();
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(&huge, len).contains("vocabulary"));
        let mut tok = good.clone();
        tok[20..24].copy_from_slice(&7u32.to_le_bytes());
        assert!(err(&tok, len).contains("outside the vocabulary"));
        assert!(LogProbWriter::new(Vec::new(), 4, 5, &tokens[..3]).is_err());
    }

    #[test]
    fn nearest_int_rounds_as_ggml() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(65534.6), 65535);
        assert_eq!(nearest_int(0.49), 0);
    }
}
