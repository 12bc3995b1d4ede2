// Records: SQLite's varints, a record's fields and their values.

package sqlitecells

import "errors"

// uvarint is SQLite's big-endian varint at the start of b and its length
// (0: none).
func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < 9 && i < len(b); i++ {
		if i == 8 {
			return v<<8 | uint64(b[i]), 9
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

// field is one value of a record: its serial type and bytes.
type field struct {
	serial uint64
	data   []byte
}

// record splits a record into its fields.
func record(b []byte) ([]field, error) {
	hlen, k := uvarint(b)
	if k == 0 || hlen > uint64(len(b)) || hlen < uint64(k) {
		return nil, errors.New("a bad record header")
	}
	hdr, body := b[k:hlen], b[hlen:]
	var out []field
	for len(hdr) > 0 {
		st, k := uvarint(hdr)
		if k == 0 {
			return nil, errors.New("a bad serial type")
		}
		hdr = hdr[k:]
		var n uint64
		switch {
		case st <= 4:
			n = st
		case st == 5:
			n = 6
		case st == 6 || st == 7:
			n = 8
		case st == 8 || st == 9:
			n = 0
		case st == 10 || st == 11:
			return nil, errors.New("a reserved serial type")
		default:
			n = (st - 12) / 2
		}
		if n > uint64(len(body)) {
			return nil, errors.New("a value runs past its record")
		}
		out = append(out, field{serial: st, data: body[:n]})
		body = body[n:]
	}
	return out, nil
}

// textOrBlob reports whether f is a text or a blob value.
func (f field) textOrBlob() bool { return f.serial >= 12 }

// intField is an integer field's value.
func intField(f field) (int64, bool) {
	switch {
	case f.serial == 8:
		return 0, true
	case f.serial == 9:
		return 1, true
	case f.serial >= 1 && f.serial <= 6:
		var v int64
		for _, c := range f.data {
			v = v<<8 | int64(c)
		}
		if n := len(f.data); n < 8 && f.data[0]&0x80 != 0 {
			v -= 1 << (8 * n) // sign-extend
		}
		return v, true
	}
	return 0, false
}
