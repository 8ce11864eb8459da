// Package tfevents writes TensorBoard event files: scalars that
// `tensorboard --logdir DIR` plots, with no dependency beyond the standard
// library.
//
// An event file is a sequence of TFRecords, each
//
//	uint64 length (little-endian)
//	uint32 masked CRC-32C of those 8 bytes
//	length bytes: one serialized tensorflow.Event protobuf
//	uint32 masked CRC-32C of those bytes
//
// where the mask is ((crc>>15)|(crc<<17)) + 0xa282ead8 and CRC-32C is
// hash/crc32 with the Castagnoli table. The first event carries
// file_version "brain.Event:2". The protobufs are written by hand: only the
// fields below exist here.
//
//	Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
//	             Summary summary = 5; SessionLog session_log = 6 }
//	Summary    { repeated Value value = 1 }
//	Value      { string tag = 1; float simple_value = 2 }
//	SessionLog { enum status = 1 }   // START = 1
//
// A file is only appended to, one write per record, so a killed process
// leaves at most a torn last record, which TensorBoard skips.
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// FileVersion is the file_version of a file's first event.
const FileVersion = "brain.Event:2"

// Marker is the substring TensorBoard looks for in the names of event files.
const Marker = "tfevents"

// sessionStart is SessionLog.SessionStatus START.
const sessionStart = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC returns the masked CRC-32C of b that TFRecord framing stores.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// Writer appends events to one event file.
type Writer struct {
	f    *os.File
	path string
	rec  []byte // reused record buffer
}

// Create opens a new event file in dir (created when needed), named
// events.out.tfevents.<unix seconds of now>.<hostname>, with ".1", ".2"...
// appended when that name is taken, so that a later file of the same second
// sorts after the earlier one (TensorBoard reads a directory's files in name
// order). It writes the file_version event.
func Create(dir string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("event file: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.ReplaceAll(host, string(filepath.Separator), "_")
	base := filepath.Join(dir, fmt.Sprintf("events.out.%s.%d.%s", Marker, now.Unix(), host))
	path := base
	var f *os.File
	for n := 1; ; n++ {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
		if !errors.Is(err, fs.ErrExist) || n > 1000 {
			break
		}
		path = fmt.Sprintf("%s.%d", base, n)
	}
	if err != nil {
		return nil, fmt.Errorf("event file: %w", err)
	}
	w := &Writer{f: f, path: path}
	ev := appendHeader(nil, now, 0)
	ev = appendBytes(ev, 3, []byte(FileVersion))
	if err := w.write(ev); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Path returns the file's path.
func (w *Writer) Path() string { return w.path }

// Scalars appends one event at step with every value of values as a scalar
// summary (float32, tags in sorted order).
func (w *Writer) Scalars(step int64, wall time.Time, values map[string]float64) error {
	var sum []byte
	for _, tag := range slices.Sorted(maps.Keys(values)) {
		v := appendBytes(nil, 1, []byte(tag))
		v = appendTag(v, 2, wireFixed32)
		v = binary.LittleEndian.AppendUint32(v, math.Float32bits(float32(values[tag])))
		sum = appendBytes(sum, 1, v)
	}
	ev := appendHeader(nil, wall, step)
	return w.write(appendBytes(ev, 5, sum))
}

// Start appends a SessionLog START event at step: TensorBoard then drops
// the points of earlier files at steps >= step (those of a run that was
// killed after its last checkpoint and resumed from it).
func (w *Writer) Start(step int64, wall time.Time) error {
	log := appendTag(nil, 1, wireVarint)
	log = binary.AppendUvarint(log, sessionStart)
	ev := appendHeader(nil, wall, step)
	return w.write(appendBytes(ev, 6, log))
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// write frames ev as a TFRecord and appends it in one write.
func (w *Writer) write(ev []byte) error {
	r := binary.LittleEndian.AppendUint64(w.rec[:0], uint64(len(ev)))
	r = binary.LittleEndian.AppendUint32(r, MaskedCRC(r[:8]))
	r = append(r, ev...)
	r = binary.LittleEndian.AppendUint32(r, MaskedCRC(ev))
	w.rec = r
	if _, err := w.f.Write(r); err != nil {
		return fmt.Errorf("event file %s: %w", w.path, err)
	}
	return nil
}

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field<<3|wire))
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendTag(b, field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendHeader appends an Event's wall_time (seconds) and step.
func appendHeader(b []byte, wall time.Time, step int64) []byte {
	b = appendTag(b, 1, wireFixed64)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(wall.UnixNano())/1e9))
	b = appendTag(b, 2, wireVarint)
	return binary.AppendUvarint(b, uint64(step))
}
