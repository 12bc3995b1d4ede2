package oneapi

import (
	"bytes"
	"crypto/sha1"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// one-api's token counter (github.com/pkoukk/tiktoken-go v0.1.7) downloads
// its BPE files at start unless $TIKTOKEN_CACHE_DIR holds them under the
// SHA-1 hex of the download URL; github.com/pkoukk/tiktoken-go-loader
// embeds the same files, so WriteTiktokenCache readies an offline start.

// tiktokenBase is where tiktoken-go v0.1.7 (encoding.go) fetches every
// encoding: <tiktokenBase><name>.tiktoken.
const tiktokenBase = "https://openaipublic.blob.core.windows.net/encodings/"

// TiktokenCacheName is the file name tiktoken-go gives the download of url in its
// cache folder: the SHA-1 of the URL, in hex.
func TiktokenCacheName(url string) string {
	return fmt.Sprintf("%x", sha1.Sum([]byte(url)))
}

// WriteTiktokenCache writes every embedded encoding into dir under its cache name
// and returns how many it wrote. A file already there with the same bytes
// is left alone; others are replaced atomically (temp file and rename), so
// a one-api starting beside it never reads half a file.
func WriteTiktokenCache(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("tiktoken cache: %w", err)
	}
	names, err := fs.Glob(assets.Assets, "*.tiktoken")
	if err != nil || len(names) == 0 {
		return 0, fmt.Errorf("tiktoken cache: no *.tiktoken in github.com/pkoukk/tiktoken-go-loader/assets (%v)", err)
	}
	for _, name := range names {
		data, err := assets.Assets.ReadFile(name)
		if err != nil {
			return 0, fmt.Errorf("tiktoken cache: read %s: %w", name, err)
		}
		dst := filepath.Join(dir, TiktokenCacheName(tiktokenBase+name))
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, data) {
			continue
		}
		tmp, err := os.CreateTemp(dir, ".setup-*")
		if err != nil {
			return 0, fmt.Errorf("tiktoken cache: %w", err)
		}
		_, werr := tmp.Write(data)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			os.Remove(tmp.Name())
			return 0, fmt.Errorf("tiktoken cache: write %s: %w", name, err)
		}
		if err := os.Chmod(tmp.Name(), 0o644); err != nil {
			os.Remove(tmp.Name())
			return 0, fmt.Errorf("tiktoken cache: %w", err)
		}
		if err := os.Rename(tmp.Name(), dst); err != nil {
			os.Remove(tmp.Name())
			return 0, fmt.Errorf("tiktoken cache: %w", err)
		}
	}
	return len(names), nil
}
