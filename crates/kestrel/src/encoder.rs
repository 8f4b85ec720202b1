//! `EncoderModel`: a sentence-embedding model (BERT family, e.g. all-MiniLM-L6-v2 converted
//! with [`crate::convert`]): text in, one L2-normalized vector out, pooled as the file says.

use std::path::Path;
use std::sync::Arc;

use kestrel_generate::{Encoder, EncoderOptions, Pooling};
use kestrel_gguf::{GgufModel, OpenOptions};

use crate::device::check_cpu_device;
use crate::{Error, LoadOptions, ModelInfo};

/// A loaded encoder model.
///
/// ```no_run
/// use kestrel::{cosine, EncoderModel, LoadOptions};
/// let mut m = EncoderModel::load_file("all-minilm-l6-v2.gguf", LoadOptions::default())?;
/// let a = m.embed("A man is eating food.")?;
/// let b = m.embed("A man is eating a piece of bread.")?;
/// println!("similarity {:.3}", cosine(&a, &b));
/// # Ok::<(), kestrel::Error>(())
/// ```
#[derive(Debug)]
pub struct EncoderModel {
    encoder: Encoder,
    model: Arc<GgufModel>,
}

impl EncoderModel {
    /// Load by file path, alias or hub repo (see [`crate::Model::load`]).
    pub fn load(name: &str, opts: LoadOptions) -> Result<EncoderModel, Error> {
        let path = crate::hub::Hub::from_env().resolve(name)?;
        Self::load_file(path, opts)
    }

    /// Load a GGUF encoder. `opts.ctx` caps the input length (0: the model's positions);
    /// `threads`, `mmap` and `device` apply as for [`crate::Model`].
    pub fn load_file(path: impl AsRef<Path>, opts: LoadOptions) -> Result<EncoderModel, Error> {
        check_cpu_device(&opts.device, "encoders")?;
        let model = Arc::new(GgufModel::open_with(path, OpenOptions { mmap: opts.mmap })?);
        let encoder = Encoder::new(
            model.clone(),
            EncoderOptions {
                threads: opts.threads,
                max_tokens: opts.ctx,
                truncate: false,
            },
        )?;
        Ok(EncoderModel { encoder, model })
    }

    /// The pooled, L2-normalized embedding of `text` (an input longer than
    /// [`max_tokens`](Self::max_tokens) is an error, never silently cut).
    pub fn embed(&mut self, text: &str) -> Result<Vec<f32>, Error> {
        Ok(self.encoder.embed(text)?)
    }

    /// [`embed`](Self::embed) for each text.
    pub fn embed_batch<S: AsRef<str>>(&mut self, texts: &[S]) -> Result<Vec<Vec<f32>>, Error> {
        texts.iter().map(|t| self.embed(t.as_ref())).collect()
    }

    /// The embedding of token ids (special tokens included as given), pooled as asked.
    pub fn embed_ids(&mut self, ids: &[u32], pooling: Pooling) -> Result<Vec<f32>, Error> {
        Ok(self.encoder.embed_ids(ids, pooling)?)
    }

    /// Token ids of `text` as [`embed`](Self::embed) sees them (`[CLS] … [SEP]`).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, Error> {
        Ok(self.encoder.tokenize(text)?)
    }

    /// Length of the vectors.
    pub fn dimensions(&self) -> usize {
        self.encoder.config().n_embd
    }

    /// The longest input in tokens.
    pub fn max_tokens(&self) -> usize {
        self.encoder.max_tokens()
    }

    /// The pooling [`embed`](Self::embed) uses.
    pub fn pooling(&self) -> Pooling {
        self.encoder.pooling()
    }

    /// What the model is.
    pub fn info(&self) -> ModelInfo {
        ModelInfo::of(&self.model, self.encoder.max_tokens())
    }
}

/// Cosine similarity of two vectors (0 when either is all zeros or their lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        (ab / (aa.sqrt() * bb.sqrt())) as f32
    }
}
