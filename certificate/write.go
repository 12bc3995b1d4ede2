package certificate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The files Write writes.
const (
	JSONFile     = "certificate.json"
	JUnitFile    = "junit.xml"
	MarkdownFile = "summary.md"
)

// StepSummaryVar is the variable GitHub Actions names its step summary file in.
const StepSummaryVar = "GITHUB_STEP_SUMMARY"

// Write writes certificate.json, junit.xml and summary.md into dir (made
// if missing; each file replaced whole, never left half written), then
// appends summary.md to the file $GITHUB_STEP_SUMMARY names, when
// lookupEnv (os.LookupEnv in a real run) says it is set.
func (c *Certificate) Write(dir string, lookupEnv func(string) (string, bool)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	var md bytes.Buffer
	if err := c.WriteMarkdown(&md); err != nil {
		return err
	}
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{JSONFile, c.WriteJSON},
		{JUnitFile, c.WriteJUnit},
		{MarkdownFile, func(w io.Writer) error { _, err := w.Write(md.Bytes()); return err }},
	}
	for _, f := range files {
		var buf bytes.Buffer
		if err := f.write(&buf); err != nil {
			return fmt.Errorf("write certificate %s: %w", f.name, err)
		}
		if err := writeFileAtomic(filepath.Join(dir, f.name), buf.Bytes()); err != nil {
			return fmt.Errorf("write certificate: %w", err)
		}
	}
	if lookupEnv == nil {
		return nil
	}
	if path, ok := lookupEnv(StepSummaryVar); ok && path != "" {
		if err := appendFile(path, md.Bytes()); err != nil {
			return fmt.Errorf("append summary to $%s: %w", StepSummaryVar, err)
		}
	}
	return nil
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it over path.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

func appendFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(append(append([]byte(nil), data...), '\n'))
	return errors.Join(werr, f.Close())
}
