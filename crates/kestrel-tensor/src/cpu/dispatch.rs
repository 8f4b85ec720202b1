//! Runtime choice of the dot kernels: once per process, the active instruction set
//! ([`active_isa`]: the fastest this CPU has kernels for, capped by `KESTREL_ISA`) picks its
//! table ([`kernels`]) from the per-ISA modules (x86-64: AVX-512 VNNI or AVX2; aarch64: NEON
//! with or without the dot-product and matrix-multiply extensions; else the scalar twins in
//! [`super::qdot`]).
//!
//! The top of the kernel layers: it imports the per-ISA tables, nothing imports it below the
//! matmul.

use std::sync::OnceLock;

pub use super::isa::{active_isa, Isa};
use super::kernel_table::Kernels;

impl Kernels {
    /// The kernels of `isa`, or `None` when this CPU cannot run it.
    pub(crate) fn for_isa(isa: Isa) -> Option<Kernels> {
        if !Isa::available().contains(&isa) {
            return None;
        }
        match isa {
            Isa::Scalar => Some(Kernels::SCALAR),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => Some(super::x86_64::with_iq(super::x86_64::avx2_kernels(
                Kernels::SCALAR,
            ))),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => Some(super::x86_64::with_iq(super::x86_64::avx512_kernels(
                Kernels::SCALAR,
            ))),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => Some(super::aarch64::neon_kernels(Kernels::SCALAR)),
            #[cfg(target_arch = "aarch64")]
            Isa::Dotprod => Some(super::aarch64::dotprod_kernels(Kernels::SCALAR)),
            #[cfg(target_arch = "aarch64")]
            Isa::I8mm => Some(super::aarch64::i8mm_kernels(Kernels::SCALAR)),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

static KERNELS: OnceLock<Kernels> = OnceLock::new();

/// The kernels in use: those of [`active_isa`].
pub(crate) fn kernels() -> &'static Kernels {
    let k = KERNELS.get_or_init(|| Kernels::for_isa(active_isa()).unwrap_or(Kernels::SCALAR));
    debug_assert_eq!(
        k.isa,
        active_isa(),
        "the table is the active instruction set's"
    );
    k
}
