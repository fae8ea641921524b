package githost

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// MaxBranchLen is the longest branch name the client sends.
const MaxBranchLen = 255

// ValidateBranch reports whether name is a branch name galley accepts: git's
// `check-ref-format --branch` rules, restricted (as the client restricts it)
// to printable ASCII of at most 255 bytes. It is stricter than git in two
// corners, both of which git's --branch would expand rather than accept
// verbatim: a component that is exactly "@", and "@{".
// The error is galleyerr.Invalid.
func ValidateBranch(name string) error {
	const op = galleyerr.Op("githost.ValidateBranch")
	if name == "" {
		return galleyerr.E(op, galleyerr.Invalid, "empty branch name")
	}
	if len(name) > MaxBranchLen {
		return galleyerr.E(op, galleyerr.Invalid, "branch name longer than 255 bytes")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f {
			return galleyerr.E(op, galleyerr.Invalid, "branch name is not printable ASCII without spaces")
		}
	}
	// git check-ref-format --branch: no leading '-', never "HEAD", then the
	// refname rules on refs/heads/<name>.
	if name[0] == '-' || name == "HEAD" {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%q is not a valid branch name", name))
	}
	if err := plumbing.NewBranchReferenceName(name).Validate(); err != nil {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%q is not a valid branch name", name))
	}
	return nil
}
