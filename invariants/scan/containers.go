package scan

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/bzip2"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// kind is a container format recognised by the bytes it starts with.
type kind int

const (
	notContainer kind = iota
	gzipStream
	bzip2Stream
	zlibStream
	zipArchive
	tarArchive
	zstdStream
)

func (k kind) String() string {
	return [...]string{"", "gzip", "bzip2", "zlib", "zip", "tar", "zstd"}[k]
}

// weak: a two-byte signature that text may start with by chance, so the
// bytes are scanned as stored too.
func (k kind) weak() bool { return k == zlibStream }

// sniffLen is how many leading bytes sniff needs (a tar header is 512; a
// zlib stream is trial-decoded from what is there).
const sniffLen = 4096

var (
	bzipBlock = []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59} // pi: a compressed block
	bzipEnd   = []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90} // sqrt(pi): the end of an empty stream
)

// sniff names the container head starts, if any.
func sniff(h []byte) kind {
	switch {
	case len(h) >= 18 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 8 && h[3]&0xe0 == 0:
		return gzipStream
	case len(h) >= 10 && string(h[:3]) == "BZh" && h[3] >= '1' && h[3] <= '9' &&
		(bytes.Equal(h[4:10], bzipBlock) || bytes.Equal(h[4:10], bzipEnd)):
		return bzip2Stream
	case len(h) >= 22 && (string(h[:4]) == "PK\x03\x04" || string(h[:4]) == "PK\x05\x06"):
		return zipArchive
	case isTar(h):
		return tarArchive
	case isZstd(h):
		return zstdStream
	case isZlib(h):
		return zlibStream
	}
	return notContainer
}

// isTar: a POSIX or GNU tar header whose checksum holds.
func isTar(h []byte) bool {
	if len(h) < 512 || string(h[257:262]) != "ustar" {
		return false
	}
	want, err := strconv.ParseInt(strings.Trim(string(h[148:156]), " \x00"), 8, 64)
	if err != nil {
		return false
	}
	var sum int64
	for i, c := range h[:512] {
		if i >= 148 && i < 156 {
			c = ' '
		}
		sum += int64(c)
	}
	return sum == want
}

// zstdMagic starts a Zstandard frame (RFC 8878); servers compress
// transcript events with it, whole or in SQLite blobs.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// isZstd: a Zstandard frame header (the magic, then a frame header
// descriptor whose reserved bit is clear).
func isZstd(h []byte) bool {
	return len(h) >= 6 && bytes.Equal(h[:4], zstdMagic) && h[4]&0x08 == 0
}

// zstdMaxWindow bounds the window a frame may ask the decoder for: past it
// the frame is refused (a frame's window is memory the decoder holds).
const zstdMaxWindow = 64 << 20

// isZlib: a zlib header (deflate, no preset dictionary, a valid check)
// whose following bytes inflate without error as far as they go.
func isZlib(h []byte) bool {
	if len(h) < 2 || h[0]&0x0f != 8 || h[0]>>4 > 7 || (int(h[0])<<8|int(h[1]))%31 != 0 || h[1]&0x20 != 0 {
		return false
	}
	zr, err := zlib.NewReader(bytes.NewReader(h))
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, io.LimitReader(zr, 1<<16))
	return err == nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, zlib.ErrChecksum)
}

// open scans the container of kind k that r holds (ra and size give random
// access to the same bytes; zip needs them). With containersOnly the
// container's stored bytes were scanned already (a file's raw scan), so
// only its members that are containers themselves are opened. It returns
// false, having reported nothing, when r's header is not k's after all.
func (w *walker) open(k kind, r io.Reader, ra io.ReaderAt, size int64, at loc, containersOnly bool) bool {
	switch k {
	case gzipStream, bzip2Stream, zlibStream, zstdStream:
		cr := &countReader{r: r}
		zr, closer, err := w.decoder(k, cr)
		if err != nil {
			return false
		}
		defer closer()
		in := at.child(k.String(), false)
		if k.weak() {
			in.guess = true // its bytes are scanned as stored too
		}
		if g, ok := zr.(gzipTail); ok && !containersOnly {
			w.text(g.zr.Name+"\n"+g.zr.Comment+"\n"+string(g.zr.Extra), in)
		}
		w.member(w.bomb(zr, func() int64 { return cr.n }, true), in, false)
	case tarArchive:
		return w.tar(r, at, containersOnly)
	case zipArchive:
		return w.zip(ra, size, at, containersOnly)
	}
	return true
}

// decoder opens the decompressed stream of the compressed stream r of
// kind k, with what closes it.
func (w *walker) decoder(k kind, r io.Reader) (io.Reader, func(), error) {
	switch k {
	case gzipStream:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return gzipTail{zr}, func() { zr.Close() }, nil
	case zlibStream:
		zr, err := zlib.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { zr.Close() }, nil
	case zstdStream:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(uint64(w.lim.MaxMember)))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	case bzip2Stream:
		return bzip2.NewReader(r), func() {}, nil
	}
	return nil, nil, fmt.Errorf("%v is not a compressed stream", k)
}

// gzipTail ends a gzip stream at trailing bytes that are not another gzip
// member (padding, the end of a decoded text), rather than failing it.
type gzipTail struct{ zr *gzip.Reader }

func (g gzipTail) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if errors.Is(err, gzip.ErrHeader) {
		err = io.EOF
	}
	return n, err
}

func (w *walker) tar(r io.Reader, at loc, containersOnly bool) bool {
	cr := &countReader{r: r}
	tr := tar.NewReader(cr)
	for i := 0; ; i++ {
		if err := w.ctx.Err(); err != nil {
			w.report(at, fmt.Errorf("read tar: %w", err))
			return true
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return true
		}
		if err != nil {
			if i == 0 {
				return false
			}
			w.report(at.child("tar", false), fmt.Errorf("read tar after %d members: %w", i, err))
			return true
		}
		in := at.child("tar:"+hdr.Name, false)
		if !containersOnly {
			var names strings.Builder
			names.WriteString(hdr.Name + "\n" + hdr.Linkname + "\n" + hdr.Uname + "\n" + hdr.Gname + "\n")
			for k, v := range hdr.PAXRecords {
				names.WriteString(k + "=" + v + "\n")
			}
			w.text(names.String(), in)
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			w.member(w.bomb(tr, func() int64 { return cr.n }, false), in, containersOnly)
		}
	}
}

func (w *walker) zip(ra io.ReaderAt, size int64, at loc, containersOnly bool) bool {
	if ra == nil {
		return false
	}
	zr, err := zip.NewReader(ra, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		// No central directory (a zip cut short, or one inside other
		// bytes): walk its local headers instead.
		if size > w.lim.MaxBuffer {
			return false
		}
		data := make([]byte, size)
		if _, err := ra.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
			return false
		}
		return w.zipLocal(data, at, containersOnly)
	}
	if !containersOnly {
		w.text(zr.Comment, at.child("zip", false))
	}
	for _, f := range zr.File {
		if err := w.ctx.Err(); err != nil {
			w.report(at, fmt.Errorf("read zip: %w", err))
			return true
		}
		in := at.child("zip:"+f.Name, false)
		if !containersOnly {
			w.text(f.Name+"\n"+f.Comment+"\n"+string(f.Extra), in)
		}
		if f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			w.report(in, fmt.Errorf("open zip member: %w", err))
			continue
		}
		csize := int64(f.CompressedSize64)
		w.member(w.bomb(rc, func() int64 { return csize }, true), in, containersOnly && f.Method == zip.Store)
		rc.Close()
	}
	return true
}

// zipLocal reads the members of a zip from their local headers, as they
// come: a deflated member is inflated to its end, a stored one whose size
// the header gives is read as is. It returns false when data holds no
// local header.
func (w *walker) zipLocal(data []byte, at loc, containersOnly bool) bool {
	found := false
	for off := 0; off < len(data); {
		i := bytes.Index(data[off:], []byte("PK\x03\x04"))
		if i < 0 || off+i+30 > len(data) {
			break
		}
		h := data[off+i:]
		flags, method := binary.LittleEndian.Uint16(h[6:]), binary.LittleEndian.Uint16(h[8:])
		csize := int(binary.LittleEndian.Uint32(h[18:]))
		nlen, xlen := int(binary.LittleEndian.Uint16(h[26:])), int(binary.LittleEndian.Uint16(h[28:]))
		start := off + i + 30 + nlen + xlen
		if start > len(data) {
			break
		}
		found = true
		in := at.child("zip:"+string(h[30:30+nlen]), false)
		if !containersOnly {
			w.text(string(h[30:30+nlen+xlen]), in)
		}
		switch {
		case method == zip.Deflate:
			cr := &countReader{r: bytes.NewReader(data[start:])}
			fr := flate.NewReader(cr)
			w.member(w.bomb(fr, func() int64 { return cr.n }, true), in, false)
			fr.Close()
		case method == zip.Store && flags&8 == 0 && start+csize <= len(data):
			w.member(bytes.NewReader(data[start:start+csize]), in, containersOnly)
		default:
			w.report(in, fmt.Errorf("zip member without a central directory: method %d, flags %#x: not read", method, flags))
		}
		off = start
	}
	return found
}

// text matches a container's own strings (member names, comments) at at.
func (w *walker) text(s string, at loc) {
	if len(s) < MinValueLen {
		return
	}
	p := w.sink(at)
	w.m.find([]byte(s), 0, 0, p.add)
	p.flush()
}
