//! leakproof's optional native read path: the two per-record loops of a task's first step,
//! as pure functions of bytes.
//!
//! * `read_records`: a v2 record batch's (uncompressed) record area into the job's
//!   `KafkaRecord` tuples -- the work of `leakproof.kafka.records.read_records`;
//! * `FlatRecordReader`: schemaless Avro of a flat record (primitives, enums, unions of
//!   them) into a dict -- the work fastavro's `schemaless_reader` does on the decoder's
//!   fast path.
//!
//! * `encode_records`: records into a v2 batch's record area, as kafka-python's
//!   `DefaultRecordBatchBuilder.append` writes them one at a time -- the re-keying stage's
//!   copies (`leakproof.kafka.appender`);
//! * `encode_mutate_rows`: a put-only `mutateRowsTs` Thrift request, the bytes
//!   `leakproof.hbase.wire.puts.encode_mutate_rows` writes -- the session rows' writes.
//!
//! Each reader either gives exactly what the pure-Python reference gives, or declines (an error
//! from `read_records`, `None` from `FlatRecordReader.read`), and the caller then runs the
//! reference, which decides and names every bad input. The native path can only be faster;
//! what a record means, and every dead letter's kind and message, stay the reference's.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};

/// What the Python side checks before it uses this module: a build of another layout is
/// ignored (the pure path, with a line in the log), never half used.
const ABI: u32 = 2;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// An unsigned varint of at most 64 bits; longer or wider ones are the reference's to
    /// judge (its integers have no width).
    #[inline]
    fn uvarint(&mut self) -> Option<u64> {
        let mut result: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return None;
            }
            result |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(result);
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }

    #[inline]
    fn varint(&mut self) -> Option<i64> {
        let u = self.uvarint()?;
        Some(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    #[inline]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// A record's key or value: a zigzag length whose odd (negative) codes mean null.
    #[inline]
    fn nullable_bytes(&mut self) -> Option<Option<&'a [u8]>> {
        let u = self.uvarint()?;
        if u & 1 == 1 {
            return Some(None);
        }
        Some(Some(self.take(usize::try_from(u >> 1).ok()?)?))
    }
}

fn declined(why: &str) -> PyErr {
    PyValueError::new_err(why.to_string())
}

/// The bytes of a `bytes` or `bytearray` without a copy. A bytearray is only read while the
/// GIL is held and no Python code that could resize it runs (building tuples runs none).
fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    if let Ok(b) = obj.downcast::<PyByteArray>() {
        // SAFETY: see above; the slice does not outlive this call's use of the buffer.
        return Ok(unsafe { b.as_bytes() });
    }
    Err(declined("not bytes or bytearray"))
}

/// The `count` records of a batch's record area, from `pos` to the end of `buf`, each made
/// by `tuple_new(record, (offset, key, value, timestamp, headers))` -- a `KafkaRecord`
/// without its Python-level `__new__`. Raises ValueError on anything the reference would
/// not read the same way; the caller then reads the batch with the reference.
#[pyfunction]
#[pyo3(signature = (buf, pos, count, base_offset, first_timestamp, append_time, record, tuple_new))]
#[allow(clippy::too_many_arguments)]
fn read_records<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    pos: usize,
    count: usize,
    base_offset: i64,
    first_timestamp: i64,
    append_time: Option<i64>,
    record: &Bound<'py, PyAny>,
    tuple_new: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let data = bytes_of(buf)?;
    let mut c = Cursor { buf: data, pos };
    let out = PyList::empty(py);
    let no_headers = PyTuple::empty(py);
    let corrupt = || declined("the record area does not read as its header says");
    for _ in 0..count {
        let length = c.varint().ok_or_else(corrupt)?;
        let start = c.pos;
        c.byte().ok_or_else(corrupt)?; // attributes: unused by any record format so far
        let ts_delta = c.varint().ok_or_else(corrupt)?;
        let offset_delta = c.varint().ok_or_else(corrupt)?;
        let key = c.nullable_bytes().ok_or_else(corrupt)?;
        let value = c.nullable_bytes().ok_or_else(corrupt)?;
        let first = *data.get(c.pos).ok_or_else(corrupt)?;
        let headers: Bound<'py, PyAny> = if first == 0 {
            c.pos += 1;
            no_headers.clone().into_any()
        } else {
            read_headers(py, &mut c).ok_or_else(corrupt)?.into_any()
        };
        if i64::try_from(c.pos - start).ok() != Some(length) {
            return Err(corrupt());
        }
        let offset = base_offset.checked_add(offset_delta).ok_or_else(corrupt)?;
        let timestamp = match append_time {
            Some(t) => t,
            None => first_timestamp.checked_add(ts_delta).ok_or_else(corrupt)?,
        };
        let fields = PyTuple::new(
            py,
            [
                offset.into_pyobject(py)?.into_any(),
                optional_bytes(py, key),
                optional_bytes(py, value),
                timestamp.into_pyobject(py)?.into_any(),
                headers,
            ],
        )?;
        out.append(tuple_new.call1((record, fields))?)?;
    }
    if c.pos != data.len() {
        return Err(corrupt());
    }
    Ok(out)
}

fn optional_bytes<'py>(py: Python<'py>, b: Option<&[u8]>) -> Bound<'py, PyAny> {
    match b {
        Some(b) => PyBytes::new(py, b).into_any(),
        None => py.None().into_bound(py),
    }
}

/// A record's headers as the reference builds them: a list of (UTF-8 name, bytes or None).
fn read_headers<'py>(py: Python<'py>, c: &mut Cursor<'_>) -> Option<Bound<'py, PyList>> {
    let count = c.varint()?;
    if count < 0 {
        return None;
    }
    let out = PyList::empty(py);
    for _ in 0..count {
        let n = c.varint()?;
        let name = std::str::from_utf8(c.take(usize::try_from(n).ok()?)?).ok()?;
        let n = c.varint()?;
        let value = if n >= 0 {
            PyBytes::new(py, c.take(usize::try_from(n).ok()?)?).into_any()
        } else {
            py.None().into_bound(py)
        };
        let pair = PyTuple::new(py, [PyString::new(py, name).into_any(), value]).ok()?;
        out.append(pair).ok()?;
    }
    Some(out)
}

fn put_uvarint(out: &mut Vec<u8>, mut u: u64) {
    while u >= 0x80 {
        out.push((u as u8 & 0x7f) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn uvarint_len(mut u: u64) -> usize {
    let mut n = 1;
    while u >= 0x80 {
        u >>= 7;
        n += 1;
    }
    n
}

fn put_nullable(out: &mut Vec<u8>, b: &Bound<'_, PyAny>) -> PyResult<()> {
    if b.is_none() {
        out.push(1); // -1: null
        return Ok(());
    }
    let bytes = bytes_of(b)?;
    put_varint(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
    Ok(())
}

/// Records `records[start..]`, each `(key, value, timestamp, headers)`, as the next records
/// of a batch whose first record's timestamp is `first_timestamp` (None: the first of these
/// sets it), whose next offset delta is `next_offset` and which holds `used` of its
/// `batch_size` bytes. Takes records while they fit (the batch's first always does, as
/// kafka-python's builder takes it) and returns (their bytes, how many, their greatest
/// timestamp, the batch's first timestamp). The bytes are what that builder's `append`
/// writes for the same records; `appender.bulk_fits` compares the two before use.
#[pyfunction]
#[pyo3(signature = (records, start, first_timestamp, next_offset, used, batch_size))]
fn encode_records<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    start: usize,
    first_timestamp: Option<i64>,
    next_offset: i64,
    used: usize,
    batch_size: usize,
) -> PyResult<(Bound<'py, PyBytes>, usize, Option<i64>, Option<i64>)> {
    let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut body: Vec<u8> = Vec::with_capacity(512);
    let mut first = first_timestamp;
    let mut max_ts: Option<i64> = None;
    let mut taken = 0usize;
    for item in records.iter().skip(start) {
        let (key, value, ts, headers): (Bound<'py, PyAny>, Bound<'py, PyAny>, i64, Bound<'py, PyAny>) =
            item.extract()?;
        let is_first = first.is_none();
        let base = first.unwrap_or(ts);
        body.clear();
        body.push(0); // attributes
        put_varint(&mut body, ts.checked_sub(base).ok_or_else(|| declined("timestamp"))?);
        put_varint(&mut body, next_offset + taken as i64);
        put_nullable(&mut body, &key)?;
        put_nullable(&mut body, &value)?;
        let n = headers.len()?;
        put_varint(&mut body, n as i64);
        for h in headers.try_iter()? {
            let (name, v): (Bound<'py, PyString>, Bound<'py, PyAny>) = h?.extract()?;
            let name = name.to_str()?.as_bytes();
            put_varint(&mut body, name.len() as i64);
            body.extend_from_slice(name);
            put_nullable(&mut body, &v)?;
        }
        let required = body.len() + uvarint_len(((body.len() as i64) << 1) as u64);
        if !is_first && required + used + out.len() > batch_size {
            break;
        }
        put_varint(&mut out, body.len() as i64);
        out.extend_from_slice(&body);
        first = Some(base);
        max_ts = Some(max_ts.map_or(ts, |m| m.max(ts)));
        taken += 1;
    }
    Ok((PyBytes::new(py, &out), taken, max_ts, first))
}

/// Thrift's strict binary protocol, as `leakproof.hbase.wire.puts` spells it.
const MUTATE_ROWS_TS: &[u8] = b"mutateRowsTs";
const THRIFT_CALL: i32 = -2147418112 | 1; // version 1, message type CALL
const STRING_1: &[u8] = b"\x0b\x00\x01"; // field 1, a string: the table name; a row key
const LIST_2: &[u8] = b"\x0f\x00\x02\x0c"; // field 2, a list of structs: rows; mutations
const PUT_COLUMN: &[u8] = b"\x02\x00\x01\x00\x0b\x00\x02"; // isDelete = false; column
const VALUE: &[u8] = b"\x0b\x00\x03";
const TO_WAL: &[u8] = b"\x02\x00\x04\x01\x00"; // writeToWAL = true; the mutation's end
const TIMESTAMP: &[u8] = b"\x0a\x00\x03";
const NO_ATTRIBUTES: &[u8] = b"\x0d\x00\x04\x0b\x0b\x00\x00\x00\x00\x00";

fn put_i32(out: &mut Vec<u8>, n: usize) -> PyResult<()> {
    let n = i32::try_from(n).map_err(|_| declined("a length past i32"))?;
    out.extend_from_slice(&n.to_be_bytes());
    Ok(())
}

/// A field's header, then a string's length and bytes.
fn put_field(out: &mut Vec<u8>, header: &[u8], b: &[u8]) -> PyResult<()> {
    out.extend_from_slice(header);
    put_i32(out, b.len())?;
    out.extend_from_slice(b);
    Ok(())
}

/// The bytes of an exact `bytes` (a subclass may answer `len()` otherwise: declined).
fn exact_bytes<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    Ok(obj.downcast_exact::<PyBytes>().map_err(|_| declined(what))?.as_bytes())
}

/// An exact `dict`: a subclass may order or size its items otherwise than its storage.
fn exact_dict<'a, 'py>(obj: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyDict>> {
    obj.downcast_exact::<PyDict>().map_err(|_| declined(what))
}

/// `mutateRowsTs(table, [one put of its cells per row], ts, {})` with every cell written to
/// the WAL, numbered `seqid`: `rows` a dict of row key to a dict of column to value, all
/// exact `bytes`. Raises ValueError for anything else (a bytearray, a subclass, a mapping
/// that is not a dict), and the caller encodes the request with the reference.
#[pyfunction]
#[pyo3(signature = (table, rows, ts, seqid))]
fn encode_mutate_rows<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    rows: &Bound<'py, PyAny>,
    ts: i64,
    seqid: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    let table = exact_bytes(table, "the table name not bytes")?;
    let rows = exact_dict(rows, "rows not a dict")?;
    let mut out: Vec<u8> = Vec::with_capacity(64 + rows.len() * 512);
    out.extend_from_slice(&THRIFT_CALL.to_be_bytes());
    put_i32(&mut out, MUTATE_ROWS_TS.len())?;
    out.extend_from_slice(MUTATE_ROWS_TS);
    out.extend_from_slice(&seqid.to_be_bytes());
    put_field(&mut out, STRING_1, table)?;
    out.extend_from_slice(LIST_2);
    put_i32(&mut out, rows.len())?;
    for (row, cells) in rows.iter() {
        let cells = exact_dict(&cells, "cells not a dict")?;
        put_field(&mut out, STRING_1, exact_bytes(&row, "a row key not bytes")?)?;
        out.extend_from_slice(LIST_2);
        put_i32(&mut out, cells.len())?;
        for (column, value) in cells.iter() {
            put_field(&mut out, PUT_COLUMN, exact_bytes(&column, "a column not bytes")?)?;
            put_field(&mut out, VALUE, exact_bytes(&value, "a value not bytes")?)?;
            out.extend_from_slice(TO_WAL);
        }
        out.push(0); // the BatchMutation's end
    }
    out.extend_from_slice(TIMESTAMP);
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(NO_ATTRIBUTES);
    Ok(PyBytes::new(py, &out))
}

enum Prim {
    Null,
    Boolean,
    Int,
    Float,
    Double,
    Bytes,
    Str,
    Enum(Vec<Py<PyString>>),
}

struct Field {
    name: Py<PyString>,
    branches: Vec<Prim>,
    union: bool,
}

/// Schemaless Avro of one flat record schema: each top-level field a primitive, an enum, or
/// a union of those. Built once per decoder from the field list
/// `leakproof.core.native.flat_program` makes of a parsed schema.
#[pyclass(frozen)]
struct FlatRecordReader {
    fields: Vec<Field>,
}

fn prim_of(spec: &Bound<'_, PyAny>) -> PyResult<Prim> {
    if let Ok(name) = spec.extract::<String>() {
        return match name.as_str() {
            "null" => Ok(Prim::Null),
            "boolean" => Ok(Prim::Boolean),
            "int" | "long" => Ok(Prim::Int),
            "float" => Ok(Prim::Float),
            "double" => Ok(Prim::Double),
            "bytes" => Ok(Prim::Bytes),
            "string" => Ok(Prim::Str),
            other => Err(PyValueError::new_err(format!("not a flat Avro type: {other}"))),
        };
    }
    let (kind, symbols): (String, Vec<String>) = spec.extract()?;
    if kind != "enum" {
        return Err(PyValueError::new_err(format!("not a flat Avro type: {kind}")));
    }
    let py = spec.py();
    Ok(Prim::Enum(symbols.iter().map(|s| PyString::intern(py, s).unbind()).collect()))
}

#[pymethods]
impl FlatRecordReader {
    /// `fields`: (name, is_union, branches), each branch a primitive's name or
    /// ("enum", symbols); a field that is not a union has one branch.
    #[new]
    fn new(py: Python<'_>, fields: Vec<(String, bool, Vec<Bound<'_, PyAny>>)>) -> PyResult<Self> {
        let mut out = Vec::with_capacity(fields.len());
        for (name, union, branches) in fields {
            if branches.is_empty() || (!union && branches.len() != 1) {
                return Err(PyValueError::new_err(format!("field {name}: bad branches")));
            }
            let branches = branches.iter().map(prim_of).collect::<PyResult<Vec<_>>>()?;
            out.push(Field { name: PyString::intern(py, &name).unbind(), branches, union });
        }
        Ok(FlatRecordReader { fields: out })
    }

    /// The record in `value` from `start` as a dict of its fields in schema order, or None
    /// when the bytes are not exactly one such record (or hold anything the reference
    /// should judge: a boolean byte other than 0 or 1, a varint past 64 bits, bad UTF-8).
    fn read<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
        start: usize,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Ok(bytes) = value.downcast::<PyBytes>() else {
            return Ok(None);
        };
        let data = bytes.as_bytes();
        let mut c = Cursor { buf: data, pos: start };
        let rec = PyDict::new(py);
        for f in &self.fields {
            let prim = if f.union {
                let Some(i) = c.varint() else { return Ok(None) };
                match usize::try_from(i).ok().and_then(|i| f.branches.get(i)) {
                    Some(p) => p,
                    None => return Ok(None),
                }
            } else {
                &f.branches[0]
            };
            let Some(v) = read_prim(py, &mut c, prim)? else { return Ok(None) };
            rec.set_item(f.name.bind(py), v)?;
        }
        if c.pos != data.len() {
            return Ok(None);
        }
        Ok(Some(rec))
    }
}

fn read_prim<'py>(
    py: Python<'py>,
    c: &mut Cursor<'_>,
    prim: &Prim,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(Some(match prim {
        Prim::Null => py.None().into_bound(py),
        Prim::Boolean => match c.byte() {
            Some(0) => false.into_pyobject(py)?.to_owned().into_any(),
            Some(1) => true.into_pyobject(py)?.to_owned().into_any(),
            _ => return Ok(None),
        },
        Prim::Int => match c.varint() {
            Some(v) => v.into_pyobject(py)?.into_any(),
            None => return Ok(None),
        },
        Prim::Float => match c.take(4) {
            Some(b) => {
                let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                PyFloat::new(py, f64::from(v)).into_any()
            }
            None => return Ok(None),
        },
        Prim::Double => match c.take(8) {
            Some(b) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                PyFloat::new(py, f64::from_le_bytes(a)).into_any()
            }
            None => return Ok(None),
        },
        Prim::Bytes | Prim::Str => {
            let Some(n) = c.varint() else { return Ok(None) };
            let Some(b) = usize::try_from(n).ok().and_then(|n| c.take(n)) else {
                return Ok(None);
            };
            if let Prim::Bytes = prim {
                PyBytes::new(py, b).into_any()
            } else {
                match std::str::from_utf8(b) {
                    Ok(s) => PyString::new(py, s).into_any(),
                    Err(_) => return Ok(None),
                }
            }
        }
        Prim::Enum(symbols) => {
            let Some(i) = c.varint() else { return Ok(None) };
            match usize::try_from(i).ok().and_then(|i| symbols.get(i)) {
                Some(s) => s.bind(py).clone().into_any(),
                None => return Ok(None),
            }
        }
    }))
}

#[pymodule]
fn leakproof_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ABI", ABI)?;
    m.add_function(wrap_pyfunction!(read_records, m)?)?;
    m.add_function(wrap_pyfunction!(encode_records, m)?)?;
    m.add_function(wrap_pyfunction!(encode_mutate_rows, m)?)?;
    m.add_class::<FlatRecordReader>()?;
    Ok(())
}
