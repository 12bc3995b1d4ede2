package certificate

import (
	"io"
	"testing"

	"github.com/tenantcanary/tenantcanary/scenarios"
)

// bigCertificate is a catalog-sized certificate: 8 scenarios of 5 phases,
// each phase with 100 findings.
func bigCertificate() *Certificate {
	var reports []scenarios.Report
	for s := range 8 {
		r := leaking("scenario-" + string(rune('a'+s)))
		r.Phases = nil
		for p := range 5 {
			ph := scenarios.PhaseReport{Name: "phase-" + string(rune('a'+p)), Counts: scenarios.Counts{Requests: 64, Snapshots: 32}}
			for i := range 100 {
				f := leakFinding
				f.Where.Request = intp(i)
				ph.Findings = append(ph.Findings, f)
			}
			r.Phases = append(r.Phases, ph)
		}
		reports = append(reports, r)
	}
	return sample(reports...)
}

func BenchmarkRender(b *testing.B) {
	c := bigCertificate()
	for _, bc := range []struct {
		name  string
		write func(io.Writer) error
	}{{"json", c.WriteJSON}, {"junit", c.WriteJUnit}, {"markdown", c.WriteMarkdown}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.write(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
