//! A minimal writer of TensorBoard event files, so that
//! `tensorboard --logdir runs` can plot a run's scalars (loss, metrics...).
//!
//! Only scalars are written, and only std is used: the format is small enough
//! that hand-writing it is cheaper than depending on a protobuf code generator
//! and a CRC crate. An event file is a sequence of TFRecords, each holding one
//! serialized `tensorflow.Event` protobuf message:
//!
//! ```text
//! record  := u64 LE length | u32 LE masked_crc32c(length bytes)
//!            | data        | u32 LE masked_crc32c(data)
//! Event   { double wall_time = 1; int64 step = 2;
//!           oneof what { string file_version = 3; Summary summary = 5; } }
//! Summary { repeated Value value = 1; }
//! Value   { string tag = 1; oneof value { float simple_value = 2; } }
//! ```
//!
//! The first record of a file is `file_version: "brain.Event:2"`, which is what
//! TensorBoard's loader expects of a file written by TensorFlow 2 style
//! writers. The bytes produced are identical to those of the Python protobuf
//! serializer for the same messages (checked by the golden tests below).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends scalar events to one TensorBoard event file.
///
/// Writes are buffered; call [`EventWriter::flush`] (e.g. once per epoch) to
/// make them visible to a running TensorBoard and durable on disk. Dropping the
/// writer flushes the buffer but does not sync, and ignores errors.
#[derive(Debug)]
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

impl EventWriter {
    /// Creates `dir` if needed and, in it, a new event file named
    /// `events.out.tfevents.<unix_secs>.<hostname>` (`kynml` when the host name
    /// is unknown), then writes the `file_version` event.
    ///
    /// TensorBoard picks up any file whose name contains `tfevents`; the
    /// time-then-host layout is TensorFlow's, so files sort by creation time.
    /// An existing file is never overwritten: if a second writer is created in
    /// the same folder within the same second, `.2`, `.3`... is appended.
    ///
    /// # Errors
    /// Any error creating the folder or the file, or writing the first event.
    pub fn create(dir: &Path) -> io::Result<EventWriter> {
        fs::create_dir_all(dir)?;
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let base = format!("events.out.tfevents.{secs}.{}", hostname());
        let (file, path) = create_new_numbered(dir, &base)?;
        let mut writer = EventWriter { out: BufWriter::new(file), path };
        let event = encode_event(wall_time_now(), 0, &EventPayload::FileVersion("brain.Event:2"));
        writer.write_record(&event)?;
        Ok(writer)
    }

    /// The event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one scalar point: `value` for `tag` at training step `step`,
    /// stamped with the current wall time.
    ///
    /// # Errors
    /// A failed write; with buffering, most errors surface at [`flush`](Self::flush).
    pub fn scalar(&mut self, tag: &str, step: i64, value: f32) -> io::Result<()> {
        let event = encode_event(wall_time_now(), step, &EventPayload::Scalar { tag, value });
        self.write_record(&event)
    }

    /// Writes buffered events to the file and syncs its data to disk, so a
    /// crash later in the run does not lose the curves recorded so far.
    ///
    /// # Errors
    /// A failed write or sync.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()
    }

    fn write_record(&mut self, data: &[u8]) -> io::Result<()> {
        self.out.write_all(&frame_record(data))
    }
}

/// Opens `dir/base` for writing, failing rather than truncating if it exists;
/// on a name clash tries `base.2`, `base.3`... (still containing `tfevents`).
fn create_new_numbered(dir: &Path, base: &str) -> io::Result<(File, PathBuf)> {
    for n in 1u32.. {
        let path = if n == 1 { dir.join(base) } else { dir.join(format!("{base}.{n}")) };
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => {}
            Err(e) => return Err(e),
        }
    }
    unreachable!("the loop returns or errors by n = 1000")
}

/// Seconds since the Unix epoch as a double, which is what `Event.wall_time`
/// holds and what TensorBoard's "relative"/"wall" x-axes are computed from.
fn wall_time_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The machine's name for the file name, from std-only sources (no libc
/// `gethostname`). Only characters safe in a file name are kept, so a strange
/// host name cannot produce a path separator.
fn hostname() -> String {
    let candidates = [
        fs::read_to_string("/proc/sys/kernel/hostname").ok(),
        fs::read_to_string("/etc/hostname").ok(),
        std::env::var("HOSTNAME").ok(),
        std::env::var("COMPUTERNAME").ok(),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|s| s.trim().chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).collect::<String>())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "kynml".to_string())
}

// ---------------------------------------------------------------------------
// Protobuf encoding (just the subset the three messages need)
// ---------------------------------------------------------------------------

/// What an `Event` carries besides its time and step: the `what` oneof.
enum EventPayload<'a> {
    FileVersion(&'a str),
    Scalar { tag: &'a str, value: f32 },
}

// Protobuf wire types.
const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

/// Serializes a `tensorflow.Event`. Fields are written in field-number order
/// and `step` is omitted when 0, as proto3 does for default scalars, so the
/// output is byte-identical to the reference serializer. `simple_value` and the
/// payload are always written: they are oneof members, whose presence is what
/// tells TensorBoard the value is a scalar (even when it is 0.0).
fn encode_event(wall_time: f64, step: i64, payload: &EventPayload) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_key(&mut out, 1, WIRE_FIXED64);
    out.extend_from_slice(&wall_time.to_le_bytes());
    if step != 0 {
        put_key(&mut out, 2, WIRE_VARINT);
        // int64 is encoded as the two's-complement u64 (negative steps take 10 bytes).
        put_varint(&mut out, step as u64);
    }
    match payload {
        EventPayload::FileVersion(version) => put_bytes(&mut out, 3, version.as_bytes()),
        EventPayload::Scalar { tag, value } => {
            let mut summary_value = Vec::with_capacity(tag.len() + 8);
            put_bytes(&mut summary_value, 1, tag.as_bytes());
            put_key(&mut summary_value, 2, WIRE_FIXED32);
            summary_value.extend_from_slice(&value.to_le_bytes());
            let mut summary = Vec::with_capacity(summary_value.len() + 2);
            put_bytes(&mut summary, 1, &summary_value);
            put_bytes(&mut out, 5, &summary);
        }
    }
    out
}

fn put_key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire_type));
}

/// A length-delimited field (strings, bytes and embedded messages alike).
fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_key(out, field, WIRE_LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

// One varint writer for TensorBoard's events and ONNX's graphs.
use crate::protobuf::put_varint;

// ---------------------------------------------------------------------------
// TFRecord framing and CRC32C
// ---------------------------------------------------------------------------

/// Wraps one serialized event as a TFRecord. The length has its own CRC so a
/// reader can tell a torn write of the header from a huge bogus length.
fn frame_record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

/// TFRecord's masking: CRCs of data that itself contains CRCs are weak, so the
/// stored value is rotated right by 15 bits and offset by a constant.
fn masked_crc32c(data: &[u8]) -> u32 {
    crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

// The checkpoint format's CRC-32C: one implementation for both files.
use crate::checkpoint::format::crc32c;

#[cfg(test)]
mod tests {
    use super::*;

    // ---- CRC ----

    #[test]
    fn crc32c_matches_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn crc32c_matches_rfc3720_vectors() {
        // iSCSI (RFC 3720, B.4) test vectors; also the empty input.
        assert_eq!(crc32c(&[]), 0);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
    }

    // The point is to check `rotate_right` against the formula as the TFRecord
    // format spells it, so the manual rotation is deliberate.
    #[allow(clippy::manual_rotate)]
    #[test]
    fn masking_matches_the_spelled_out_formula() {
        for data in [&b""[..], b"123456789", &[0xFF; 8]] {
            let crc = crc32c(data);
            let expected = ((crc >> 15) | (crc << 17)).wrapping_add(0xa282ead8);
            assert_eq!(masked_crc32c(data), expected);
        }
    }

    // ---- varints ----

    fn varint(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        out
    }

    #[test]
    fn varint_edge_cases() {
        assert_eq!(varint(0), [0x00]);
        assert_eq!(varint(1), [0x01]);
        assert_eq!(varint(127), [0x7F]);
        assert_eq!(varint(128), [0x80, 0x01]);
        assert_eq!(varint(300), [0xAC, 0x02]);
        assert_eq!(varint(16_383), [0xFF, 0x7F]);
        assert_eq!(varint(16_384), [0x80, 0x80, 0x01]);
        assert_eq!(varint(u64::from(u32::MAX)), [0xFF, 0xFF, 0xFF, 0xFF, 0x0F]);
        let mut max = vec![0xFF; 9];
        max.push(0x01);
        assert_eq!(varint(u64::MAX), max);
        // A negative int64 is its two's complement: always 10 bytes.
        assert_eq!(varint(-1i64 as u64), max);
        assert_eq!(varint(i64::MIN as u64), [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
            let bytes = varint(v);
            let mut pos = 0;
            assert_eq!(read_varint(&bytes, &mut pos).unwrap(), v);
            assert_eq!(pos, bytes.len());
        }
    }

    // ---- golden bytes from the reference implementation ----
    //
    // Produced with tensorboard 2.21's bundled `event_pb2` (Python protobuf's
    // SerializeToString) and `record_writer.RecordWriter`.

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn scalar_event_matches_reference_serializer() {
        let event = encode_event(1_700_000_000.25, 7, &EventPayload::Scalar { tag: "loss", value: 0.5 });
        assert_eq!(event, hex("0900001040fc54d94110072a0d0a0b0a046c6f7373150000003f"));
        // Negative step, zero value (the value must still be present).
        let event = encode_event(1.5, -1, &EventPayload::Scalar { tag: "t", value: 0.0 });
        assert_eq!(event, hex("09000000000000f83f10ffffffffffffffffff012a0a0a080a01741500000000"));
    }

    #[test]
    fn file_version_event_matches_reference_serializer() {
        let event = encode_event(1_700_000_000.0, 0, &EventPayload::FileVersion("brain.Event:2"));
        assert_eq!(event, hex("0900000040fc54d9411a0d627261696e2e4576656e743a32"));
    }

    #[test]
    fn record_framing_matches_reference_writer() {
        let event = hex("0900001040fc54d94110072a0d0a0b0a046c6f7373150000003f");
        let expected = hex("1a00000000000000129bd82d0900001040fc54d94110072a0d0a0b0a046c6f7373150000003ff8ed4b36");
        assert_eq!(frame_record(&event), expected);
    }

    // ---- a test-only reader, for round trips ----

    /// A self-deleting scratch folder (std only; no tempfile crate needed).
    struct ScratchDir(PathBuf);

    impl ScratchDir {
        fn new(label: &str) -> ScratchDir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static COUNTER: AtomicU32 = AtomicU32::new(0);
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("kynml-tb-{label}-{}-{nanos}-{n}", std::process::id()));
            ScratchDir(path)
        }
    }

    impl Drop for ScratchDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[derive(Debug, Default, PartialEq)]
    struct DecodedEvent {
        wall_time: f64,
        step: i64,
        file_version: Option<String>,
        values: Vec<(String, f32)>,
    }

    fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *buf.get(*pos).ok_or("truncated varint")?;
            *pos += 1;
            v |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn take<'a>(buf: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], String> {
        let end = pos.checked_add(n).filter(|&e| e <= buf.len()).ok_or("truncated field")?;
        let bytes = &buf[*pos..end];
        *pos = end;
        Ok(bytes)
    }

    /// A field's value, by wire type.
    enum Field<'a> {
        Varint(u64),
        Fixed64([u8; 8]),
        Len(&'a [u8]),
        Fixed32([u8; 4]),
    }

    /// Splits a message into (field number, value) pairs.
    fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < buf.len() {
            let key = read_varint(buf, &mut pos)?;
            let field = match (key & 7) as u8 {
                WIRE_VARINT => Field::Varint(read_varint(buf, &mut pos)?),
                WIRE_FIXED64 => Field::Fixed64(take(buf, &mut pos, 8)?.try_into().unwrap()),
                WIRE_LEN => {
                    let n = read_varint(buf, &mut pos)? as usize;
                    Field::Len(take(buf, &mut pos, n)?)
                }
                WIRE_FIXED32 => Field::Fixed32(take(buf, &mut pos, 4)?.try_into().unwrap()),
                other => return Err(format!("unsupported wire type {other}")),
            };
            out.push((key >> 3, field));
        }
        Ok(out)
    }

    fn decode_event(buf: &[u8]) -> Result<DecodedEvent, String> {
        let mut event = DecodedEvent::default();
        for (number, field) in fields(buf)? {
            match (number, field) {
                (1, Field::Fixed64(b)) => event.wall_time = f64::from_le_bytes(b),
                (2, Field::Varint(v)) => event.step = v as i64,
                (3, Field::Len(b)) => {
                    event.file_version = Some(String::from_utf8(b.to_vec()).map_err(|e| e.to_string())?)
                }
                (5, Field::Len(summary)) => {
                    for (number, field) in fields(summary)? {
                        let (1, Field::Len(value)) = (number, field) else {
                            return Err(format!("unexpected Summary field {number}"));
                        };
                        let (mut tag, mut simple) = (None, None);
                        for (number, field) in fields(value)? {
                            match (number, field) {
                                (1, Field::Len(b)) => tag = Some(String::from_utf8(b.to_vec()).unwrap()),
                                (2, Field::Fixed32(b)) => simple = Some(f32::from_le_bytes(b)),
                                _ => return Err(format!("unexpected Value field {number}")),
                            }
                        }
                        let tag = tag.ok_or("Value without tag")?;
                        event.values.push((tag, simple.ok_or("Value without simple_value")?));
                    }
                }
                (number, _) => return Err(format!("unexpected Event field {number}")),
            }
        }
        Ok(event)
    }

    /// Splits a file into records, verifying both CRCs of each.
    fn read_records(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let mut pos = 0;
        let mut records = Vec::new();
        while pos < bytes.len() {
            let len_bytes = take(bytes, &mut pos, 8)?;
            let len_crc = u32::from_le_bytes(take(bytes, &mut pos, 4)?.try_into().unwrap());
            if len_crc != masked_crc32c(len_bytes) {
                return Err(format!("length CRC mismatch at record {}", records.len()));
            }
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            let data = take(bytes, &mut pos, len)?;
            let data_crc = u32::from_le_bytes(take(bytes, &mut pos, 4)?.try_into().unwrap());
            if data_crc != masked_crc32c(data) {
                return Err(format!("data CRC mismatch at record {}", records.len()));
            }
            records.push(data.to_vec());
        }
        Ok(records)
    }

    fn read_events(path: &Path) -> Vec<DecodedEvent> {
        let bytes = fs::read(path).unwrap();
        read_records(&bytes).unwrap().iter().map(|r| decode_event(r).unwrap()).collect()
    }

    #[test]
    fn round_trip_through_the_file() {
        let scratch = ScratchDir::new("roundtrip");
        let dir = scratch.0.join("runs").join("demo"); // nested: create() makes it
        let before = wall_time_now();
        let mut writer = EventWriter::create(&dir).unwrap();
        let points: [(&str, i64, f32); 6] = [
            ("loss/train", 0, 2.5),
            ("loss/train", 1, 1.125),
            ("accuracy", 1, 0.0),
            ("loss/train", 1_000_000_000_000, -3.0e-7),
            ("lr", -5, f32::MAX),
            ("ünïcödé tag", 42, 0.1),
        ];
        for (tag, step, value) in points {
            writer.scalar(tag, step, value).unwrap();
        }
        writer.flush().unwrap();
        let after = wall_time_now();

        let name = writer.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        assert_eq!(writer.path().parent().unwrap(), dir);

        let events = read_events(writer.path());
        assert_eq!(events.len(), 1 + points.len());
        assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
        assert_eq!(events[0].step, 0);
        assert!(events[0].values.is_empty());
        for (event, (tag, step, value)) in events[1..].iter().zip(points) {
            assert_eq!(event.file_version, None);
            assert_eq!(event.step, step);
            assert_eq!(event.values, vec![(tag.to_string(), value)]);
        }
        for event in &events {
            assert!(event.wall_time >= before && event.wall_time <= after, "{}", event.wall_time);
        }
        // Events are appended in order, so wall times never go backwards
        // (barring clock steps, which a test run will not see).
        assert!(events.windows(2).all(|w| w[0].wall_time <= w[1].wall_time));
    }

    #[test]
    fn nan_and_infinities_survive() {
        let scratch = ScratchDir::new("nonfinite");
        let mut writer = EventWriter::create(&scratch.0).unwrap();
        writer.scalar("x", 1, f32::NAN).unwrap();
        writer.scalar("x", 2, f32::INFINITY).unwrap();
        writer.scalar("x", 3, f32::NEG_INFINITY).unwrap();
        writer.flush().unwrap();
        let events = read_events(writer.path());
        assert!(events[1].values[0].1.is_nan());
        assert_eq!(events[2].values[0].1, f32::INFINITY);
        assert_eq!(events[3].values[0].1, f32::NEG_INFINITY);
    }

    #[test]
    fn drop_flushes_buffered_events() {
        let scratch = ScratchDir::new("drop");
        let path = {
            let mut writer = EventWriter::create(&scratch.0).unwrap();
            writer.scalar("loss", 3, 0.25).unwrap();
            writer.path().to_path_buf()
        };
        let events = read_events(&path);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].values, vec![("loss".to_string(), 0.25)]);
    }

    #[test]
    fn writers_in_the_same_folder_do_not_clobber_each_other() {
        let scratch = ScratchDir::new("clash");
        let mut first = EventWriter::create(&scratch.0).unwrap();
        let mut second = EventWriter::create(&scratch.0).unwrap();
        assert_ne!(first.path(), second.path());
        assert!(second.path().file_name().unwrap().to_str().unwrap().contains("tfevents"));
        first.scalar("a", 1, 1.0).unwrap();
        second.scalar("b", 1, 2.0).unwrap();
        first.flush().unwrap();
        second.flush().unwrap();
        assert_eq!(read_events(first.path())[1].values, vec![("a".to_string(), 1.0)]);
        assert_eq!(read_events(second.path())[1].values, vec![("b".to_string(), 2.0)]);
    }

    #[test]
    fn hostname_is_a_safe_file_name_component() {
        let host = hostname();
        assert!(!host.is_empty());
        assert!(host.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)), "{host}");
    }
}
