//! Quant block layouts and scalar reference (de)quantization. (Being written.)
