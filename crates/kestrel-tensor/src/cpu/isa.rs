//! The instruction sets kestrel has CPU kernels for ([`Isa`]), what this CPU runs, and the one
//! the kernels run with in this process ([`active_isa`]): the best this CPU runs, capped by
//! `KESTREL_ISA=scalar|avx2|avx512` (x86-64) or `scalar|neon|dotprod|i8mm` (aarch64) (for
//! benchmarks and A/B checks); a level above what this CPU runs gives the best it runs, and so
//! does an unknown value or one of another architecture.
//!
//! The bottom of the CPU engine: it imports nothing of it, every kernel module may import it.

use std::sync::OnceLock;

/// An instruction set kestrel has CPU kernels for. Within one architecture the levels are
/// ordered weakest first; the aarch64 levels sort below the x86-64 ones, so a test such as
/// `isa >= Isa::Avx2` holds only on x86-64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust (the scalar twins every SIMD kernel is tested against).
    Scalar,
    /// aarch64 Advanced SIMD (NEON, every aarch64 CPU).
    Neon,
    /// aarch64 NEON with the dot-product extension (`sdot`/`udot`, FEAT_DotProd: Cortex-A76
    /// and later, Apple M1 and later, Graviton 2 and later).
    Dotprod,
    /// aarch64 NEON with the dot-product and the 8-bit matrix-multiply extensions (`smmla`,
    /// FEAT_I8MM: Neoverse V1/N2 and later, Graviton 3 and later, Apple M2 and later).
    I8mm,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL + VNNI (on top of AVX2).
    Avx512,
}

/// The levels of this build's architecture, weakest first.
const LADDER: &[Isa] = if cfg!(target_arch = "x86_64") {
    &[Isa::Scalar, Isa::Avx2, Isa::Avx512]
} else if cfg!(target_arch = "aarch64") {
    &[Isa::Scalar, Isa::Neon, Isa::Dotprod, Isa::I8mm]
} else {
    &[Isa::Scalar]
};

impl Isa {
    /// The lowercase name (`scalar`, `neon`, `dotprod`, `i8mm`, `avx2`, `avx512`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
            Isa::I8mm => "i8mm",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a name as [`Isa::name`] writes it.
    pub fn from_name(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "neon" => Some(Isa::Neon),
            "dotprod" => Some(Isa::Dotprod),
            "i8mm" => Some(Isa::I8mm),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// The best instruction set this CPU runs.
    pub fn detected() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if has_avx512() {
                return Isa::Avx512;
            }
            if has_avx2() {
                return Isa::Avx2;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if has_i8mm() {
                return Isa::I8mm;
            }
            if has_dotprod() {
                return Isa::Dotprod;
            }
            return Isa::Neon;
        }
        #[allow(unreachable_code)]
        Isa::Scalar
    }

    /// Every instruction set this CPU runs, weakest first (for tests and benches).
    pub fn available() -> Vec<Isa> {
        let best = Isa::detected();
        LADDER.iter().copied().filter(|&i| i <= best).collect()
    }

    /// `want` capped at what this CPU runs; `None` (or a level of another architecture) gives
    /// the best it runs.
    pub fn capped(want: Option<Isa>) -> Isa {
        let best = Isa::detected();
        match want {
            Some(w) if LADDER.contains(&w) => w.min(best),
            _ => best,
        }
    }
}

/// AVX2 + FMA + F16C.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// [`has_avx2`] plus AVX-512 F/BW/VL and VNNI.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Advanced SIMD: part of the aarch64 base architecture, always there.
#[cfg(target_arch = "aarch64")]
pub(crate) fn has_neon() -> bool {
    true
}

/// The dot-product extension (`sdot`/`udot`).
#[cfg(target_arch = "aarch64")]
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// Whether the CPU has the matrix-multiply extension (`smmla`, FEAT_I8MM) and the dot product
/// the odd rows take.
#[cfg(target_arch = "aarch64")]
pub(crate) fn has_i8mm() -> bool {
    has_dotprod() && std::arch::is_aarch64_feature_detected!("i8mm")
}

static ACTIVE: OnceLock<Isa> = OnceLock::new();

/// The instruction set the CPU kernels run with in this process: the best this CPU runs,
/// capped by `KESTREL_ISA`.
pub fn active_isa() -> Isa {
    *ACTIVE.get_or_init(|| {
        let want = std::env::var("KESTREL_ISA")
            .ok()
            .and_then(|s| Isa::from_name(&s));
        Isa::capped(want)
    })
}

#[cfg(test)]
mod tests {
    use super::Isa;

    /// `KESTREL_ISA` caps within this architecture; above the CPU, unknown, or another
    /// architecture's level gives the best this CPU runs.
    #[test]
    fn capped_stays_within_this_architecture_and_cpu() {
        let best = Isa::detected();
        assert_eq!(Isa::capped(None), best);
        assert_eq!(Isa::capped(Some(Isa::Scalar)), Isa::Scalar);
        for isa in Isa::available() {
            assert_eq!(Isa::capped(Some(isa)), isa);
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        let foreign = if cfg!(target_arch = "x86_64") {
            vec![Isa::Neon, Isa::Dotprod, Isa::I8mm]
        } else {
            vec![Isa::Avx2, Isa::Avx512]
        };
        for isa in foreign {
            assert_eq!(Isa::capped(Some(isa)), best, "{isa:?}");
            assert!(!Isa::available().contains(&isa));
        }
        assert_eq!(Isa::from_name(" AVX2 "), Some(Isa::Avx2));
        assert_eq!(Isa::from_name("sse4"), None);
    }
}
