package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
)

// ExecVocabulary is the placeholder of remote.exec: the one command line
// the harness runs on the server's host.
var ExecVocabulary = placeholder.Vocabulary{Of: "remote.exec", Vars: []placeholder.Var{
	{Name: "command", Doc: "a POSIX shell command line the harness runs on the server's host, every value in it quoted (remote.Quote)"},
}}

// ErrNUL is Quote's and Exec's error for a value holding a NUL byte,
// which no shell word (and no argv) can carry.
var ErrNUL = errors.New("a NUL byte cannot be part of a shell command line")

// Quote returns s as one word of a POSIX shell command line: s in single
// quotes, each single quote of s ending the quoted run, escaped with a
// backslash, and opening the next (the one character a single-quoted word
// cannot hold). Every byte but NUL survives it as it is: $, `, \, ",
// newlines, globs, a leading -, bytes that are no UTF-8. A NUL is refused
// with ErrNUL.
func Quote(s string) (string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", fmt.Errorf("quote %.40q: %w", s, ErrNUL)
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'", nil
}

// Command is the command line that runs words[0] with the others as its
// arguments: every word quoted (Quote). Compose command lines from it
// (joined with " && ", " | ", redirections of quoted paths) so that no
// value reaches the remote shell unquoted.
func Command(words ...string) (string, error) {
	q := make([]string, len(words))
	for i, w := range words {
		var err error
		if q[i], err = Quote(w); err != nil {
			return "", err
		}
	}
	return strings.Join(q, " "), nil
}

// MustCommand is Command for words the caller made itself (numbers,
// paths of its own): it panics on a NUL, a programming error.
func MustCommand(words ...string) string {
	c, err := Command(words...)
	if err != nil {
		panic(err)
	}
	return c
}

// Execs reports whether the harness can run a command on the server's
// host (remote.exec).
func (s *Spec) Execs() bool { return s != nil && len(s.Exec) > 0 }

// validateExec checks remote.exec: {command} is one whole element of it
// (the shell it runs in gets the command line as one argument), and
// nothing else of its vocabulary.
func (s *Spec) validateExec() error {
	if len(s.Exec) == 0 {
		return nil
	}
	if err := ExecVocabulary.Check(s.Exec); err != nil {
		return fmt.Errorf("remote.exec: %w", err)
	}
	whole := 0
	for _, a := range s.Exec {
		switch {
		case a == "{command}":
			whole++
		case strings.Contains(a, "{command}"):
			return fmt.Errorf("remote.exec: {command} inside %q: it must be a whole element of the argv (ssh HOST \"{command}\", sh -c \"{command}\"), the command line as one argument", a)
		}
	}
	if whole != 1 {
		return fmt.Errorf("remote.exec: want {command} as exactly one element of %q (the command line the harness runs on the server's host), got %d", strings.Join(s.Exec, " "), whole)
	}
	return nil
}

// Shell runs command, a POSIX shell command line (build it with Command),
// on the server's host through remote.exec: in a process group of its
// own that ctx's end kills whole, stdin from in (nil: none), stdout to
// out (nil: kept and returned). A non-zero exit is an error naming the
// command and the end of its stderr.
func (s *Spec) Shell(ctx context.Context, command string, in io.Reader, out io.Writer) (string, error) {
	if !s.Execs() {
		return "", fmt.Errorf("%s: %w", FieldExec, ErrNoCommand)
	}
	if strings.IndexByte(command, 0) >= 0 {
		return "", fmt.Errorf("%s: %w", FieldExec, ErrNUL)
	}
	argv := slices.Clone(s.Exec)
	for i, a := range argv {
		if a == "{command}" {
			argv[i] = command
		}
	}
	return Run(ctx, FieldExec, argv, "", in, out)
}

// CheckExec runs a harmless command through remote.exec (printf of a
// word holding quotes, $, a backslash, a glob and a newline) and checks
// that it printed that word exactly: the transport runs the command line
// in a POSIX shell, and hands it over as one argument, unsplit.
func (s *Spec) CheckExec(ctx context.Context) error {
	nonce := make([]byte, 6)
	_, _ = rand.Read(nonce)
	probe := "tcanary exec probe " + hex.EncodeToString(nonce) + ` 'it''s' "$HOME" $(id) \n * ;` + "\nend"
	const hint = "the command line must reach a POSIX shell as one argument (ssh joins its arguments into one line for the remote shell: give {command} as ssh's last argument, with no sh -c before it)"
	out, err := s.Shell(ctx, MustCommand("printf", "%s", probe), nil, nil)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, hint)
	}
	if out != probe {
		return fmt.Errorf("%s: printf of a quoted word printed %.200q, want %.200q: %s", FieldExec, out, probe, hint)
	}
	return nil
}
