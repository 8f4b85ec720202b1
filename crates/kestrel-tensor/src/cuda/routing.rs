//! What a mixture-of-experts layer's routing on the device takes ([`RouteSpec`]), with and
//! without the `cuda` feature, so a plan can decide whether a layer routes on the device before
//! any device exists.

/// How [`CudaDevice::moe_route`](super::CudaDevice::moe_route) turns a row's router logits into
/// probabilities (kestrel-graph's `MoeGating`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteGating {
    /// Softmax over all experts.
    Softmax,
    /// The logistic sigmoid of each logit.
    Sigmoid,
    /// The logits as they are for the choice; softmax over the chosen ones for their weights.
    SoftmaxWeight,
}

/// Most experts a layer routed on the device has (`MOE_MAX_EXPERTS` in kernels/moe.cu).
pub const MAX_ROUTED_EXPERTS: usize = 512;
/// Most experts a token uses, and most expert groups, on the device (a warp's lanes).
pub const MAX_ROUTED_USED: usize = 32;

/// One MoE layer's routing rule, as kestrel-graph's `moe::route` applies it on the host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouteSpec {
    /// Experts.
    pub n_expert: usize,
    /// Experts chosen per token.
    pub n_used: usize,
    /// Logits to probabilities.
    pub gating: RouteGating,
    /// Expert groups `(groups, used)`: only experts of the `used` best groups (each scored by
    /// its two best selection scores) can be chosen.
    pub groups: Option<(usize, usize)>,
    /// Divide the chosen weights by their sum (clamped to f16's smallest normal).
    pub norm_weights: bool,
    /// Multiply the chosen weights by this (0 or 1: no change).
    pub weights_scale: f32,
}

impl RouteSpec {
    /// Why the device cannot route this rule (`None`: it can): too many experts, chosen experts
    /// or groups, more chosen than there are, or groups that do not split the experts evenly.
    pub fn unsupported(&self) -> Option<&'static str> {
        let (ne, k) = (self.n_expert, self.n_used);
        if ne == 0 || ne > MAX_ROUTED_EXPERTS {
            return Some("1 to 512 experts");
        }
        if k == 0 || k > MAX_ROUTED_USED || k > ne {
            return Some("1 to 32 chosen experts, no more than there are");
        }
        if let Some((g, used)) = self.groups {
            if g == 0 || g > MAX_ROUTED_USED || !ne.is_multiple_of(g) || used == 0 || used > g {
                return Some("1 to 32 expert groups that split the experts evenly");
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(n_expert: usize, n_used: usize, groups: Option<(usize, usize)>) -> RouteSpec {
        RouteSpec {
            n_expert,
            n_used,
            gating: RouteGating::Softmax,
            groups,
            norm_weights: false,
            weights_scale: 1.0,
        }
    }

    #[test]
    fn the_device_routes_what_its_kernel_holds() {
        assert_eq!(spec(256, 8, Some((8, 4))).unsupported(), None);
        assert_eq!(spec(128, 8, None).unsupported(), None);
        assert!(spec(513, 8, None).unsupported().is_some());
        assert!(spec(4, 5, None).unsupported().is_some());
        assert!(spec(64, 33, None).unsupported().is_some());
        assert!(spec(60, 4, Some((8, 2))).unsupported().is_some());
        assert!(spec(64, 4, Some((8, 9))).unsupported().is_some());
        assert!(spec(0, 0, None).unsupported().is_some());
    }
}
