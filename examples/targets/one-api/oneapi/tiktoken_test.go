package oneapi

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/pkoukk/tiktoken-go"
)

type noNetwork struct{ t *testing.T }

func (n noNetwork) RoundTrip(req *http.Request) (*http.Response, error) {
	n.t.Logf("tiktoken tried the network: %s", req.URL)
	return nil, errors.New("no network in this test")
}

// One-api's encoders load from the cache WriteTiktokenCache writes with no
// network; the same encoder with an empty cache needs the network (the
// positive control: the transport below is what tiktoken-go uses).
func TestTiktokenCacheOffline(t *testing.T) {
	saved := http.DefaultTransport
	http.DefaultTransport = noNetwork{t}
	t.Cleanup(func() { http.DefaultTransport = saved })

	t.Setenv("TIKTOKEN_CACHE_DIR", t.TempDir())
	if _, err := tiktoken.GetEncoding("p50k_base"); err == nil {
		t.Fatal("p50k_base loaded from an empty cache with no network: the test does not see tiktoken-go's download")
	}

	dir := t.TempDir()
	t.Setenv("TIKTOKEN_CACHE_DIR", dir)
	n, err := WriteTiktokenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("wrote %d encodings, want 4 (cl100k_base, o200k_base, p50k_base, r50k_base)", n)
	}
	// The models one-api's InitTokenEncoders asks for, and p50k_base.
	for _, model := range []string{"gpt-3.5-turbo", "gpt-4", "gpt-4o"} {
		enc, err := tiktoken.EncodingForModel(model)
		if err != nil {
			t.Fatalf("encoder for %s offline: %v", model, err)
		}
		if got := enc.Encode("hello world", nil, nil); len(got) != 2 {
			t.Errorf("%s encodes %q as %v, want 2 tokens", model, "hello world", got)
		}
	}
	if _, err := tiktoken.GetEncoding("p50k_base"); err != nil {
		t.Fatalf("p50k_base offline: %v", err)
	}
	// A second run leaves the files alone and leaves no temp file.
	if _, err := WriteTiktokenCache(dir); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".setup-*"))
	entries, _ := os.ReadDir(dir)
	if len(left) != 0 || len(entries) != 4 {
		t.Errorf("cache folder holds %d entries (temp files %v), want the 4 encodings", len(entries), left)
	}
}

func TestTiktokenCacheName(t *testing.T) {
	// sha1("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken")
	const want = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
	if got := TiktokenCacheName(tiktokenBase + "cl100k_base.tiktoken"); got != want {
		t.Errorf("cache name %s, want %s", got, want)
	}
}
