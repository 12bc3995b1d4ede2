package scenarios

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// Row by row: each chain run keeps a window on the run's evidence (the
// provider requests, the frames and the home files of the time it ran),
// and once every phase is checked, each finding whose evidence lies in a
// window and that the row itself caused (chainRun.credits) is the row's.
// The report lists every row with the invariants it was found by, so the
// self-test can require each row's own leak of its own fault.

// evidenceMark is the run's evidence counted at one moment.
type evidenceMark struct {
	at     time.Time
	reqs   map[string]int              // tenant -> the last request's sequence number
	frames map[string]int              // connection label -> frames received
	files  map[string]invariants.Entry // every file under the homes
}

// chainWindow is the evidence of one chain run: what came between two
// marks, and the findings the scenario itself made for the row.
type chainWindow struct {
	start, end time.Time
	reqs       map[string][2]int   // tenant -> sequence numbers (from, to]
	frames     map[string][2]int   // label -> frame indexes [from, to)
	files      map[string][2]int64 // home files added (-1) or changed (their size before), and their size after
	direct     map[string]bool     // findings (String) made for the row
}

// markEvidence counts the run's evidence now.
func (e *Env) markEvidence() evidenceMark {
	m := evidenceMark{at: time.Now(), reqs: map[string]int{}, frames: map[string]int{}, files: map[string]invariants.Entry{}}
	for _, t := range e.Box.Set.Tenants {
		if !t.HasProvider() {
			continue
		}
		if seq, ok := t.LastRequestSeq(); ok {
			m.reqs[t.Name] = seq
		}
	}
	e.mu.Lock()
	conns := append([]ownedConn(nil), e.conns...)
	e.mu.Unlock()
	for _, c := range conns {
		m.frames[c.label] = len(c.conn.Frames())
	}
	if e.Box.Target.HomesReachable() {
		for _, root := range invariants.TenantRoots(e.Box.Set) {
			_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return nil
				}
				if info, err := d.Info(); err == nil {
					m.files[path] = invariants.Entry{Size: info.Size(), ModTime: info.ModTime(), Mode: info.Mode()}
				}
				return nil
			})
		}
	}
	return m
}

// windowOf is the evidence between two marks. A file of gone (it went
// between them, and came again) is added in the window.
func windowOf(from, to evidenceMark, gone map[string]bool) *chainWindow {
	w := &chainWindow{start: from.at, end: to.at, reqs: map[string][2]int{}, frames: map[string][2]int{}, files: map[string][2]int64{}, direct: map[string]bool{}}
	for t, n := range to.reqs {
		w.reqs[t] = [2]int{from.reqs[t], n}
	}
	for l, n := range to.frames {
		w.frames[l] = [2]int{from.frames[l], n}
	}
	for p, a := range to.files {
		switch b, ok := from.files[p]; {
		case !ok || gone[p]:
			w.files[p] = [2]int64{-1, a.Size}
		case b != a:
			w.files[p] = [2]int64{b.Size, a.Size}
		}
	}
	return w
}

// providerLabel is where the operator-secret scan places a request.
var providerLabel = regexp.MustCompile(`^request #(\d+) on (\S+)'s provider`)

// holds reports whether f's evidence came in r's window: a request of its
// tenant's provider, a frame of its connection, a home file made in the
// time (or the hit past the file's old end), a file outside the homes
// written in the time, or a finding made for the row.
func (r *chainRun) holds(f invariants.Finding, outside map[string]time.Time) bool {
	w := r.window
	if w == nil {
		return false
	}
	seq, tenant := -1, f.Tenant
	if f.Where.Request != nil {
		seq = *f.Where.Request
	} else if m := providerLabel.FindStringSubmatch(f.Where.Label); m != nil {
		seq, _ = strconv.Atoi(m[1])
		tenant = m[2]
	}
	switch {
	case w.direct[f.String()]:
		return true
	case r.kind != "" && f.Owner == r.a.Name && f.Kind == r.kind:
		// The row's own canary, minted for this run alone: wherever it is,
		// the row put it there, whatever the offset (SQLite inserts a row
		// into a page below the file's old end; the server may write on
		// after the window closed, through a link it still holds).
		return true
	case seq >= 0:
		rg, ok := w.reqs[tenant]
		return ok && seq > rg[0] && seq <= rg[1]
	case f.Where.Frame != nil:
		rg, ok := w.frames[f.Where.Label]
		return ok && *f.Where.Frame >= rg[0] && *f.Where.Frame < rg[1]
	case f.Where.Path != "":
		if rg, ok := w.files[f.Where.Path]; ok {
			// Made in the time, or the hit lies past the file's old end (a
			// WAL, a log): a file that only changed (a tenant's own
			// database, written by every turn) holds older hits too. A hit
			// past the file's end when the window closed was written after
			// it (by what an earlier row left open).
			old, end := rg[0], rg[1]
			raw := f.Where.Part == "" && f.Where.Offset != nil
			if raw && *f.Where.Offset >= end {
				return false
			}
			return old < 0 || raw && *f.Where.Offset >= old
		}
		at, ok := outside[f.Where.Path]
		return ok && !at.Before(w.start) && !at.After(w.end)
	}
	return false
}

// credits reports whether f, which r's window holds, is r's own doing: a
// finding made for r; the attacker's own canary only when it is the one
// minted for r (an earlier row's is not r's); another tenant's canary only
// in the attacker's places, and only when the attacker's own files did not
// already hold that tenant's canaries as r began (an earlier row's
// leftovers); a finding of no tenant's canary in the attacker's places or
// in no tenant's. A run that never began (its stale set unknown) is
// credited with what was made for it only.
func (r *chainRun) credits(f invariants.Finding) bool {
	switch {
	case r.window != nil && r.window.direct[f.String()]:
		return true
	case r.stale == nil:
		return false
	case f.Owner == r.a.Name:
		return f.Kind == r.kind
	case f.Owner != "":
		return f.Tenant == r.a.Name && !r.stale.has(f)
	}
	return f.Tenant == r.a.Name || f.Tenant == ""
}

// staleKey is f without its offset: the same evidence found again at
// another offset (a WAL that grew, a log re-read) is the same finding.
func staleKey(f invariants.Finding) string {
	f.Where.Offset = nil
	return f.String()
}

// chainFind reports f as a finding made for r.
func (e *Env) chainFind(r *chainRun, f invariants.Finding) {
	if r.window == nil {
		r.window = &chainWindow{direct: map[string]bool{}}
	}
	r.window.direct[f.String()] = true
	e.Find(f)
}

// rowsWindow is the window of runs (a round of a restart shares one)
// while it is open.
type rowsWindow struct {
	e    *Env
	from evidenceMark
	runs []*chainRun
	gone map[string]bool // home files that went while it was open (serverDown)
}

// openWindow starts the windows of runs.
func (e *Env) openWindow(runs ...*chainRun) *rowsWindow {
	return &rowsWindow{e: e, from: e.markEvidence(), runs: runs, gone: map[string]bool{}}
}

// serverDown notes, with the server stopped, the home files that went
// since the window opened (a WAL a clean stop removes): one there again at
// the close is a new file, added in the window (windowOf), and no earlier
// window of the phase holds a hit in it any more (forgetWent).
func (w *rowsWindow) serverDown() {
	for p := range wentBetween(w.from, w.e.markEvidence()) {
		w.gone[p] = true
	}
	st := stateOf(w.e, chainsKey)
	forgetWent(st.runs, st.phase, w.gone)
}

// wentBetween is the files of from that now lacks.
func wentBetween(from, now evidenceMark) map[string]bool {
	gone := map[string]bool{}
	for p := range from.files {
		if _, ok := now.files[p]; !ok {
			gone[p] = true
		}
	}
	return gone
}

// forgetWent drops the files of gone from the windows of the phase's runs
// closed so far: the phase's scan reads the files made again since, and
// the offsets those windows measured were of the ones that went.
func forgetWent(runs []*chainRun, phase string, gone map[string]bool) {
	for _, r := range runs {
		if r.window != nil && r.phase == phase {
			for p := range gone {
				delete(r.window.files, p)
			}
		}
	}
}

// close ends the windows.
func (w *rowsWindow) close() {
	cw := windowOf(w.from, w.e.markEvidence(), w.gone)
	for _, r := range w.runs {
		if r.window != nil {
			for k := range r.window.direct {
				cw.direct[k] = true
			}
		}
		own := *cw
		own.direct = writableCopy(cw.direct)
		r.window = &own
		r.took = cw.end.Sub(cw.start)
	}
}

// chainRows is the last phase of hostile-chains: the report lists each
// row with the invariants it was found by (attributeChains).
func (e *Env) chainRows() {
	e.mu.Lock()
	phases := slices.Clone(e.Report.Phases)
	e.mu.Unlock()
	st := stateOf(e, chainsKey)
	runs := st.runs
	found, evidence := attributeChains(phases, runs, st.outside)
	var rows []ChainRow
	for i, r := range runs {
		row := ChainRow{Row: r.ch.ID, Attacker: r.a.Name, Victim: r.v.Name, Outcome: r.outcome, Duration: r.took, Evidence: evidence[i], Stopped: r.stopped}
		for inv, n := range found[i] {
			row.Found = append(row.Found, inv)
			row.Findings += n
		}
		sort.Slice(row.Found, func(a, b int) bool { return row.Found[a] < row.Found[b] })
		rows = append(rows, row)
	}
	rows = append(rows, st.skipped...)
	e.mu.Lock()
	e.Report.Chains = append(e.Report.Chains, rows...)
	e.mu.Unlock()
	for _, row := range rows {
		if len(row.Found) > 0 {
			e.Logf("chain %s by %s against %s found by %s", row.Row, row.Attacker, row.Victim, strings.Join(invNames(row.Found), ", "))
		}
	}
}

// attributeChains gives every leak finding of the phases (once: found
// again at another offset, it is the same) to the runs of its phase whose
// window holds its evidence and that caused it (chainRun.credits): those
// whose attacker and victim it names first, else every one. Another
// tenant's canary in an attacker's place is none of its rows' when, in
// the same window, that tenant attacked the place. It returns,
// per run, the findings of each invariant and the first few as text.
func attributeChains(phases []PhaseReport, runs []*chainRun, outside map[string]time.Time) ([]map[invariants.Invariant]int, [][]string) {
	found := make([]map[invariants.Invariant]int, len(runs))
	evidence := make([][]string, len(runs))
	for i := range found {
		found[i] = map[invariants.Invariant]int{}
	}
	seen := map[string]bool{}
	for _, p := range phases {
		// A row's evidence is checked right after its phase: a finding is
		// only ever a row's of the phase that first reported it.
		var inPhase []int
		for i, r := range runs {
			if r.phase == p.Name {
				inPhase = append(inPhase, i)
			}
		}
		// Once per phase too, at its first offset: a WAL writes a page again
		// (further on) whenever a row of it changes, so what leaked once
		// reappears past the old end of later windows.
		first := map[string]int{}
		var fresh []invariants.Finding
		for _, f := range p.Findings {
			k := staleKey(f)
			if !f.Invariant.Leak() || seen[k] {
				continue
			}
			if i, ok := first[k]; ok {
				if g := fresh[i]; f.Where.Offset != nil && g.Where.Offset != nil && *f.Where.Offset < *g.Where.Offset {
					fresh[i] = f
				}
				continue
			}
			first[k] = len(fresh)
			fresh = append(fresh, f)
		}
		for _, f := range p.Findings {
			seen[staleKey(f)] = true
		}
		for _, f := range fresh {
			var holders []int
			for _, i := range inPhase {
				if runs[i].holds(f, outside) {
					holders = append(holders, i)
				}
			}
			var got, pair []int
			for _, i := range holders {
				r := runs[i]
				if !r.credits(f) || r.a.Name != f.Owner && attacks(runs, holders, f.Owner, f.Tenant) {
					continue
				}
				got = append(got, i)
				if r.a.Name == f.Tenant && r.v.Name == f.Owner || r.a.Name == f.Owner && r.v.Name == f.Tenant {
					pair = append(pair, i)
				}
			}
			if len(pair) > 0 {
				got = pair
			}
			for _, i := range got {
				found[i][f.Invariant]++
				if len(evidence[i]) < 3 {
					evidence[i] = append(evidence[i], f.String())
				}
			}
		}
	}
	return found, evidence
}

// attacks reports whether, among the runs of a shared window (holders),
// owner attacked the place tenant: another tenant's canary found there may
// then be that row's doing (a restart round's rows are planted at once),
// never the row whose attacker the place is.
func attacks(runs []*chainRun, holders []int, owner, tenant string) bool {
	for _, i := range holders {
		if r := runs[i]; owner != "" && r.a.Name == owner && r.v.Name == tenant {
			return true
		}
	}
	return false
}

func invNames(is []invariants.Invariant) []string {
	out := make([]string, len(is))
	for i, v := range is {
		out[i] = string(v)
	}
	return out
}
