//! The resource quantity parsers (`resources::quantity_value`, `quantity_milli_value`,
//! `parse_quantity_nanos`, `qos::parse_quantity`; upstream `resource.ParseQuantity`): limits,
//! requests, `emptyDir.sizeLimit` and eviction thresholds come from users.

/// Parses `data` as a quantity with each parser.
pub fn run(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = kubelet_core::resources::quantity_value(s);
    let _ = kubelet_core::resources::quantity_milli_value(s);
    let _ = kubelet_core::resources::parse_quantity_nanos(s);
    let _ = kubelet_core::qos::parse_quantity(s);
}
