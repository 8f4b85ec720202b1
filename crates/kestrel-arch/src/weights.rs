//! Weights as tensors that view the model file: no copy, no f32 expansion; the tensor keeps its
//! shard's mapping alive through an `Arc`.

use kestrel_gguf::GgufModel;
use kestrel_tensor::{ByteOwner, DType, Shape, Tensor};

/// The tensor `name` of `model`, viewing the file's bytes, or `None` if absent or of a type
/// kestrel cannot compute with.
pub fn weight_tensor(model: &GgufModel, name: &str) -> Option<Tensor> {
    let (file, info) = model.tensor_location(name)?;
    let dtype = DType::try_from(info.ggml_type()).ok()?;
    let dims: Vec<usize> = info
        .dims()
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    let shape = Shape::new(if dims.is_empty() { &[1] } else { &dims }).ok()?;
    let owner: ByteOwner = file.clone();
    Tensor::from_shared(
        dtype,
        shape,
        owner,
        usize::try_from(info.file_offset()).ok()?,
    )
    .ok()
}
