//! Reading a Pod (or Event) as JSON for the printers: the string or array at a JSON pointer,
//! empty where it is absent, as kubectl prints a missing field.

use serde_json::Value;

/// The string at `pointer`; `""` when absent or not a string.
pub fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The array at `pointer`; empty when absent or not an array.
pub fn arr<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}
