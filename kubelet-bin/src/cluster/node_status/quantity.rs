//! Resource amounts as the node status writes them: [`kubelet_core::quantity`], the one home
//! of upstream's `Quantity.String()` formatting.

pub use kubelet_core::quantity::{Amount, Format};
