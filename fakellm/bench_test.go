package fakellm_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// A typical small agent turn: one user message and one tool on offer.
const benchBody = `{"model":"model-alice","stream":%s,"messages":[{"role":"system","content":"You are a helpful agent."},{"role":"user","content":"run the environment probe please"}],"tools":[{"type":"function","function":{"name":"terminal","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}]}`

// benchRequests drives the server with b.RunParallel through one
// keep-alive client and reports requests per second.
func benchRequests(b *testing.B, stream bool) {
	s := start(b, fakellm.Options{
		Keys: []string{"sk-alice"},
		Responder: func(fakellm.Record) fakellm.Response {
			return fakellm.Text("probe done for alice")
		},
	})
	flag := "false"
	if stream {
		flag = "true"
	}
	body := []byte(fmt.Sprintf(benchBody, flag))
	url := s.BaseURL + "/chat/completions"
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer sk-alice")
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("status %d, read: %v", resp.StatusCode, err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	if got := len(s.Requests()); got < b.N {
		b.Fatalf("server recorded %d of %d requests", got, b.N)
	}
}

func BenchmarkNonStreamed(b *testing.B) { benchRequests(b, false) }
func BenchmarkStreamed(b *testing.B)    { benchRequests(b, true) }
