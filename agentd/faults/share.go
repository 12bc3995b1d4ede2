package faults

// Faults of the fair share (issue 46): a tenant that spreads its load over
// more connections buys more of the server.
const (
	// PerConnectionShare: the turn queue counts a tenant's running turns
	// per connection instead of per profile (its group is the profile and
	// the connection), so a tenant with N connections runs N times its
	// profile's share of turns at once.
	PerConnectionShare Name = "per-connection-share"
)

// shareFaults lists the faults of this file.
func shareFaults() []Name { return []Name{PerConnectionShare} }
