package scenarios

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tenantcanary/tenantcanary/harness"
)

// TestLogMarksScanOnlyWhatIsNew: a log that grew is scanned from where the
// last scan ended; one whose start changed (a kept tail dropped lines) is
// scanned whole; each process has its own mark.
func TestLogMarksScanOnlyWhatIsNew(t *testing.T) {
	t.Parallel()
	var m logMarks
	p, q := &harness.Proc{}, &harness.Proc{}
	first := []byte("line 1\nline 2")
	assert.Equal(t, 0, m.since(p, first))
	grown := append(append([]byte(nil), first...), "\nline 3"...)
	assert.Equal(t, len(first), m.since(p, grown))
	assert.Equal(t, len(grown), m.since(p, grown), "nothing new")
	assert.Equal(t, 0, m.since(p, []byte("line 2\nline 3\nline 4")), "a log that lost its start is scanned whole")
	assert.Equal(t, 0, m.since(q, grown), "another process's log has its own mark")
}
