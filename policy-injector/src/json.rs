//! Typed access to the parts of the spec a rule reads. The spec stays a `serde_json::Value` so
//! that fields no rule touches survive untouched, in order; these helpers turn a wrong type
//! into `HardenError::Malformed` naming the field. A JSON `null` counts as absent, as Go's
//! encoder writes nil pointers that way.

use serde_json::{Map, Value};

use crate::error::HardenError;

pub(crate) type Object = Map<String, Value>;

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn wrong(path: &str, key: &str, want: &str) -> HardenError {
    HardenError::malformed(child(path, key), format!("expected {want}"))
}

pub(crate) fn opt_object<'a>(
    m: &'a Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a Object>, HardenError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(wrong(path, key, "an object")),
    }
}

pub(crate) fn opt_object_mut<'a>(
    m: &'a mut Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a mut Object>, HardenError> {
    match m.get_mut(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(wrong(path, key, "an object")),
    }
}

/// The object at `key`, created empty when absent or null.
pub(crate) fn ensure_object<'a>(
    m: &'a mut Object,
    key: &str,
    path: &str,
) -> Result<&'a mut Object, HardenError> {
    if matches!(m.get(key), None | Some(Value::Null)) {
        m.insert(key.to_string(), Value::Object(Object::new()));
    }
    match m.get_mut(key) {
        Some(Value::Object(o)) => Ok(o),
        _ => Err(wrong(path, key, "an object")),
    }
}

pub(crate) fn opt_array<'a>(
    m: &'a Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a Vec<Value>>, HardenError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(_) => Err(wrong(path, key, "an array")),
    }
}

pub(crate) fn opt_array_mut<'a>(
    m: &'a mut Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a mut Vec<Value>>, HardenError> {
    match m.get_mut(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(_) => Err(wrong(path, key, "an array")),
    }
}

pub(crate) fn opt_str<'a>(
    m: &'a Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, HardenError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(wrong(path, key, "a string")),
    }
}

pub(crate) fn opt_bool(m: &Object, key: &str, path: &str) -> Result<Option<bool>, HardenError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(wrong(path, key, "a boolean")),
    }
}

/// A signed integer field (OCI int64). Integers above `i64::MAX` are out of range for the field.
pub(crate) fn opt_i64(m: &Object, key: &str, path: &str) -> Result<Option<i64>, HardenError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) => Ok(Some(v)),
            None if n.is_u64() => Err(HardenError::malformed(
                child(path, key),
                "integer out of range for int64",
            )),
            None => Err(wrong(path, key, "an integer")),
        },
        Some(_) => Err(wrong(path, key, "an integer")),
    }
}

/// An unsigned integer field (OCI uint64/uint32). A negative number is malformed.
pub(crate) fn opt_u64(m: &Object, key: &str, path: &str) -> Result<Option<u64>, HardenError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) => Ok(Some(v)),
            None if n.is_i64() => Err(HardenError::malformed(
                child(path, key),
                "negative value for an unsigned field",
            )),
            None => Err(wrong(path, key, "an integer")),
        },
        Some(_) => Err(wrong(path, key, "an integer")),
    }
}

/// A list of strings, checked but not copied.
pub(crate) fn str_list<'a>(v: &'a Value, path: &str) -> Result<Vec<&'a str>, HardenError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str().ok_or_else(|| {
                    HardenError::malformed(format!("{path}[{i}]"), "expected a string")
                })
            })
            .collect(),
        _ => Err(HardenError::malformed(path, "expected an array of strings")),
    }
}

pub(crate) fn strings_value(items: &[String]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.clone())).collect())
}

/// Any JSON integer, signed or unsigned, widened so that range checks are the caller's.
pub(crate) fn opt_int(m: &Object, key: &str, path: &str) -> Result<Option<i128>, HardenError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(v) = n.as_i64() {
                Ok(Some(i128::from(v)))
            } else if let Some(v) = n.as_u64() {
                Ok(Some(i128::from(v)))
            } else {
                Err(wrong(path, key, "an integer"))
            }
        }
        Some(_) => Err(wrong(path, key, "an integer")),
    }
}
