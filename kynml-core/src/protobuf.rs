//! The one piece of protobuf's wire format that TensorBoard's event files
//! and ONNX's graphs both write by hand: base-128 varints.

/// Appends `v` as a base-128 varint: 7 bits per byte, least significant
/// group first, the high bit set on every byte but the last. (Its tests are
/// in `report::tensorboard` and `export::onnx`, against both formats' uses.)
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
