package profile

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrBadSlug is returned for a model.save_key slug outside [a-z][a-z0-9_]*.
var ErrBadSlug = errors.New("bad slug")

// The length is checked apart (see ValidName).
var slugRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// ValidSlug reports whether slug may name a saved key: 1-64 of [a-z0-9_],
// starting with a letter. It becomes the variable <SLUG>_API_KEY of the
// profile's .env, so it never holds a path separator, a dot, a quote, an
// = or a space.
func ValidSlug(slug string) error {
	if len(slug) > 64 || !slugRE.MatchString(slug) {
		return fmt.Errorf("%w %q: want 1-64 of [a-z0-9_], starting with a letter", ErrBadSlug, slug)
	}
	return nil
}
