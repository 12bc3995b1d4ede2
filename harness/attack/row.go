package attack

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Class groups rows by what they do, so a scenario runs each class where it
// belongs: reads and writes in a tenant's main session, spawns in a session
// (or host) whose end the scenario then checks.
type Class string

const (
	Read  Class = "read"  // brings foreign data back as the tool result
	Write Class = "write" // puts the attacker's canary where another tenant reads
	Spawn Class = "spawn" // starts processes that try to outlive their owner
	Flood Class = "flood" // too much of something (output, time, memory)
)

// Canaries are the attacker's own values a row's call carries: Write in
// everything it writes, Mark in the environment and command line of
// everything it starts.
type Canaries struct {
	Write string
	Mark  string
}

// Call is one tool call of the hostile model.
type Call struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
}

// Row is one attack.
type Row struct {
	ID      string // unique, [a-z0-9-]
	Class   Class
	Tries   string // what the attacker tries, one line
	Refusal string // what a server that isolates its tenants does instead, one line
	Call    func(Canaries) Call
	// Refusable: a server that holds may refuse the tool outright (a
	// chain's probe after a planted setting, which a defended server
	// answers with the refusal): the result that came back proves the
	// call ran, with or without the row's end marker.
	Refusable bool
}

var rowID = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// Validate checks a table: unique well-formed IDs, a known class, both
// lines, and a call that carries the attacker's canary wherever a write or
// spawn needs one.
func Validate(rows []Row) error {
	var errs []error
	seen := map[string]bool{}
	probe := Canaries{Write: "write-probe-0123456789", Mark: "mark-probe-0123456789"}
	for i, r := range rows {
		name := fmt.Sprintf("row %d (%q)", i, r.ID)
		if !rowID.MatchString(r.ID) {
			errs = append(errs, fmt.Errorf("%s: id: want lower-case words joined by '-'", name))
		}
		if seen[r.ID] {
			errs = append(errs, fmt.Errorf("%s: id given twice", name))
		}
		seen[r.ID] = true
		switch r.Class {
		case Read, Write, Spawn, Flood:
		default:
			errs = append(errs, fmt.Errorf("%s: class %q is not read, write, spawn or flood", name, r.Class))
		}
		for what, s := range map[string]string{"tries": r.Tries, "refusal": r.Refusal} {
			if strings.TrimSpace(s) == "" || strings.Contains(s, "\n") {
				errs = append(errs, fmt.Errorf("%s: %s: want one non-empty line", name, what))
			}
		}
		if r.Call == nil {
			errs = append(errs, fmt.Errorf("%s: no call", name))
			continue
		}
		c := r.Call(probe)
		if c.Tool == "" {
			errs = append(errs, fmt.Errorf("%s: the call names no tool", name))
		}
		b, err := json.Marshal(c.Args)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: arguments: %w", name, err))
		}
		switch r.Class {
		case Write:
			if !strings.Contains(string(b), probe.Write) {
				errs = append(errs, fmt.Errorf("%s: a write must carry the attacker's write canary", name))
			}
		case Spawn:
			if !strings.Contains(string(b), probe.Mark) {
				errs = append(errs, fmt.Errorf("%s: a spawn must carry the attacker's mark", name))
			}
		}
	}
	return errors.Join(errs...)
}

// Of lists the rows of rows in class c, in order.
func Of(rows []Row, c Class) []Row {
	return only(rows, func(r Row) bool { return r.Class == c })
}

// only lists the items of xs that keep keeps, in order.
func only[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
