package faults

// Faults of the defences against a tenant's special or huge home files
// (issue 46).
const (
	// HomeSpecialFiles: the files agentd reads from a home are opened
	// blocking, need not be regular files and are read whole, whatever
	// their size, as agentd 0.14.1 read the files it read lazily: a FIFO
	// (no writer) hangs the read, a huge sparse file grows the server by
	// its size. Links are still refused unless home-follows-links is on
	// too (a link to /dev/zero is then read without end).
	HomeSpecialFiles Name = "home-special-files"
)

// homeFilesFaults lists the faults of this file.
func homeFilesFaults() []Name {
	return []Name{HomeSpecialFiles}
}
