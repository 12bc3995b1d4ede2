package tenants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// RosterVersion is the format of a roster file.
const RosterVersion = 1

// ErrRoster wraps every reason a roster file is refused.
var ErrRoster = errors.New("not a tenant roster")

// RosterTenant is one tenant as a roster records it: everything another
// process needs to recognise its canaries and to configure the target.
type RosterTenant struct {
	Name         string   `json:"name"`
	Tag          string   `json:"tag"`
	Launch       bool     `json:"launch"`
	BaseURL      string   `json:"base_url"`
	Key          string   `json:"key"`
	Model        string   `json:"model"`
	APIServerKey string   `json:"api_server_key"`
	Workdir      string   `json:"workdir"` // the terminal cwd the target is configured with
	Canaries     []Canary `json:"canaries"`
}

// Roster is the tenants of a staging run: `canary-run fakellm` writes it
// while its providers serve and journal; a later run against the staging
// server reads it to look for exactly these canaries.
type Roster struct {
	Version int            `json:"version"`
	Launch  string         `json:"launch"`
	Journal string         `json:"journal"` // the providers' journal (JSON lines of fakellm records)
	Tenants []RosterTenant `json:"tenants"`
}

// Roster describes the set's tenants, with journal as the path of their
// providers' journal.
func (s *Set) Roster(journal string) Roster {
	r := Roster{Version: RosterVersion, Journal: journal}
	for _, t := range s.Tenants {
		if t.Launch {
			r.Launch = t.Name
		}
		r.Tenants = append(r.Tenants, RosterTenant{
			Name: t.Name, Tag: t.Tag, Launch: t.Launch, BaseURL: t.ProviderURL(),
			Key: t.ProviderKey(), Model: t.Model(), APIServerKey: t.APIServerKey(), Workdir: t.Workdir, Canaries: t.Canaries(),
		})
	}
	return r
}

// WriteRoster writes r as indented JSON.
func WriteRoster(path string, r Roster) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write roster %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write roster: %w", err)
	}
	return nil
}

// ReadRoster reads and checks a roster: every tenant's base canaries, key
// and model are the ones its name and tag make (so rebuilding the tenants
// from name and tag looks for exactly what was planted), there is one
// launch tenant, and names are valid and unique.
func ReadRoster(path string) (Roster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Roster{}, fmt.Errorf("read roster: %w", err)
	}
	return DecodeRoster(path, data)
}

// DecodeRoster checks a roster's bytes, read from path, as ReadRoster does
// (for a caller that reads the file its own way).
func DecodeRoster(path string, data []byte) (Roster, error) {
	var r Roster
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("read roster %s: %w: %w", path, ErrRoster, err)
	}
	bad := func(format string, args ...any) (Roster, error) {
		return r, fmt.Errorf("read roster %s: "+format+": %w", append(append([]any{path}, args...), ErrRoster)...)
	}
	if r.Version != RosterVersion {
		return bad("version %d, want %d", r.Version, RosterVersion)
	}
	if len(r.Tenants) == 0 {
		return bad("no tenant")
	}
	launches, seen := 0, map[string]bool{}
	for _, t := range r.Tenants {
		if err := ValidName(t.Name); err != nil {
			return bad("%v", err)
		}
		if seen[t.Name] {
			return bad("tenant %s listed twice", t.Name)
		}
		seen[t.Name] = true
		if t.Launch {
			launches++
		}
		if len(t.Tag) != 10 {
			return bad("tenant %s: tag %q is not 10 hex digits", t.Name, t.Tag)
		}
		for i, k := range BaseKinds {
			want := Canary{Owner: t.Name, Kind: k, Value: CanaryValue(k, t.Name, t.Tag)}
			if i >= len(t.Canaries) || t.Canaries[i] != want {
				return bad("tenant %s: canary %d is not %+v, which its name and tag make", t.Name, i, want)
			}
		}
		if t.Key != CanaryValue(ProviderKey, t.Name, t.Tag) || t.Model != CanaryValue(Model, t.Name, t.Tag) ||
			t.APIServerKey != CanaryValue(APIServerKey, t.Name, t.Tag) {
			return bad("tenant %s: key, model or API key does not follow from its tag", t.Name)
		}
		if t.BaseURL == "" {
			return bad("tenant %s: no base_url", t.Name)
		}
		if !filepath.IsAbs(t.Workdir) || filepath.Base(t.Workdir) != CanaryValue(Workdir, t.Name, t.Tag) {
			return bad("tenant %s: workdir %q is not an absolute path ending in its workdir canary", t.Name, t.Workdir)
		}
	}
	if launches != 1 {
		return bad("%d launch tenants, want 1", launches)
	}
	return r, nil
}

// FromRoster rebuilds a roster's tenants under root, with the same tags
// and canaries; their providers run in another process, whose journal
// (the roster's, or journal if not empty) is where Tenant.Requests reads
// their records. Only records journaled after FromRoster count, so each
// run sees its own. Homes are the target's: they are not written.
func FromRoster(root string, r Roster, layout Layout, journal string) (*Set, error) {
	if journal == "" {
		journal = r.Journal
	}
	if journal == "" {
		return nil, fmt.Errorf("tenants from roster: no journal to read the providers' records from")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("tenants from roster: resolve root %q: %w", root, err)
	}
	layout = layout.WithDefaults()
	s := &Set{Root: abs, Home: filepath.Join(abs, "home"), Layout: layout, workRoot: filepath.Join(abs, "work"),
		opts: Options{NoProviders: true}}
	s.LaunchHome = filepath.Join(s.Home, layout.LaunchDir)
	j := &journalReader{path: journal}
	base, err := j.records()
	if err != nil {
		return nil, fmt.Errorf("tenants from roster: %w", err)
	}
	for _, rt := range r.Tenants {
		t := &Tenant{Name: rt.Name, Launch: rt.Launch, Tag: rt.Tag}
		t.Home = s.LaunchHome
		if !t.Launch {
			t.Home = filepath.Join(s.LaunchHome, layout.ProfilesDir, rt.Name)
		}
		t.State = layout.StateFolder(s.Root, t)
		t.Workdir = rt.Workdir
		t.workDir = filepath.Dir(rt.Workdir) // minted workdirs go beside the first
		t.remote = &remoteProvider{baseURL: rt.BaseURL, journal: j}
		for _, rec := range base {
			if rec.Server == rt.BaseURL {
				t.remote.skip++
			}
		}
		for _, c := range rt.Canaries[len(BaseKinds):] {
			t.minted = append(t.minted, c)
		}
		s.Tenants = append(s.Tenants, t)
	}
	return s, nil
}

// remoteProvider is a provider in another process, known by its advertised
// base URL and the journal it writes.
type remoteProvider struct {
	baseURL string
	journal *journalReader
	skip    int // records of this provider journaled before the run
}

// journalReader reads a journal file, again only when it has grown.
type journalReader struct {
	path string

	mu   sync.Mutex
	size int64
	recs []fakellm.Record
	err  error
}

func (j *journalReader) records() ([]fakellm.Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	info, err := os.Stat(j.path)
	if err != nil {
		j.err = fmt.Errorf("read journal: %w", err)
		return nil, j.err
	}
	if info.Size() == j.size && j.recs != nil {
		return j.recs, j.err
	}
	f, err := os.Open(j.path)
	if err != nil {
		j.err = fmt.Errorf("read journal: %w", err)
		return nil, j.err
	}
	defer f.Close()
	recs, err := fakellm.ReadJournal(f)
	if err != nil {
		// The writer may be mid-line: keep what parsed, and say so.
		j.err = fmt.Errorf("read journal %s: %w", j.path, err)
	} else {
		j.err = nil
	}
	j.size, j.recs = info.Size(), recs
	if j.recs == nil {
		j.recs = []fakellm.Record{}
	}
	return j.recs, j.err
}
