package githost

import (
	"fmt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// ValidateBranch reports whether name is a branch name galley accepts. It
// applies the protocol's rule (protocol.IsBranchName: git's
// `check-ref-format --branch`, printable ASCII, at most 255 bytes), so that
// the git side never refuses a name the request validation let through, nor
// touches a ref the protocol would refuse. The error is galleyerr.Invalid.
func ValidateBranch(name string) error {
	if !protocol.IsBranchName(name) {
		return galleyerr.E(galleyerr.Op("githost.ValidateBranch"), galleyerr.Invalid,
			fmt.Sprintf("%q is not a valid branch name", name))
	}
	return nil
}
