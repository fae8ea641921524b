package protocol

import (
	"unicode/utf8"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Limits the client enforces on every value it sends or reads
// (spec/client-notes.md, "Value limits").
const (
	MaxIdentifierLen    = 64
	MaxReferenceLen     = 256
	MaxTextLen          = 64 << 10
	MaxBranchLen        = 255
	MaxReportPathLen    = 4096
	MaxModelLen         = 128
	MaxEffortLen        = 64
	MaxReceiptResources = 16
	MaxInventoryRows    = 1024
	MaxWaitMs           = 900000
)

// Roles a launch may name.
const (
	RoleChefOwner   = "chef-owner"
	RoleSousChef    = "sous-chef"
	RoleStationCook = "station-cook"
	RoleCommis      = "commis"
	RoleExpediter   = "expediter"
	RoleGardener    = "gardener"
	RoleDishwasher  = "dishwasher"
	RoleInspector   = "inspector"
)

// Agent families a selection may name.
const (
	AgentClaude = "claude"
	AgentCodex  = "codex"
)

// Workspace types of a launch.
const (
	WorkspaceIsolated = "isolated"
	WorkspaceExisting = "existing"
)

// Support values of a descriptor and effort modes of workerSelection.
const (
	SupportSupported = "supported"
	SupportPartial   = "partial"

	EffortUnsupported = "unsupported"
	EffortWithModel   = "with-model"
	EffortAlways      = "always"
)

// Cost bases of a usage report.
const (
	BasisReported = "reported"
	BasisComputed = "computed"
)

// Usage statuses.
const (
	UsageNone     = "none"
	UsageReported = "reported"
)

// IsIdentifier reports whether s matches ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$
// (backend, house, credential, task).
func IsIdentifier(s string) bool {
	if len(s) == 0 || len(s) > MaxIdentifierLen || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// isGraphic reports whether c is printable ASCII other than space.
func isGraphic(c byte) bool { return c >= 0x21 && c <= 0x7E }

// IsReference reports whether s is 1 to 256 bytes of printable ASCII without
// spaces (handles, keys, run, coordinator, message and batch ids, receipt
// reference, owner, question).
func IsReference(s string) bool {
	if len(s) == 0 || len(s) > MaxReferenceLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isGraphic(s[i]) {
			return false
		}
	}
	return true
}

// IsText reports whether s is 1 byte to 64 KiB of valid UTF-8 without NUL
// (brief, bodies).
func IsText(s string) bool { return isTextN(s, MaxTextLen) }

func isTextN(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0 {
			return false
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		i += size
	}
	return true
}

// IsBranchName reports whether git check-ref-format --branch accepts s, and
// s is printable ASCII of at most 255 bytes. It is stricter than git in two
// places only: non-ASCII bytes and the name "@" (which git's revision syntax
// reads as HEAD) are refused.
func IsBranchName(s string) bool {
	n := len(s)
	if n == 0 || n > MaxBranchLen || s[0] == '-' || s == "@" || s == "HEAD" {
		return false
	}
	if s[n-1] == '.' || s[n-1] == '/' {
		return false
	}
	comp := 0 // start of the current slash-separated component
	var prev byte
	for i := 0; i < n; i++ {
		c := s[i]
		if !isGraphic(c) {
			return false // control characters, space, DEL, non-ASCII
		}
		switch c {
		case '~', '^', ':', '?', '*', '[', '\\':
			return false
		case '.':
			if prev == '.' || i == comp {
				return false // ".." or a component starting with "."
			}
		case '{':
			if prev == '@' {
				return false // "@{"
			}
		case '/':
			if i == comp || hasLockSuffix(s[comp:i]) {
				return false // "//", a leading "/", or a component ending ".lock"
			}
			comp = i + 1
		}
		prev = c
	}
	return !hasLockSuffix(s[comp:])
}

func hasLockSuffix(s string) bool { return len(s) >= 5 && s[len(s)-5:] == ".lock" }

// IsCommitID reports whether s is a full SHA-1 or SHA-256 object name in
// lowercase hex.
func IsCommitID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// IsReportPath reports whether s is a relative path of text (no NUL, valid
// UTF-8) of at most 4096 bytes with no ".." component.
func IsReportPath(s string) bool {
	if !isTextN(s, MaxReportPathLen) || s[0] == '/' {
		return false
	}
	comp := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '/' {
			if i-comp == 2 && s[comp] == '.' && s[comp+1] == '.' {
				return false
			}
			comp = i + 1
		}
	}
	return true
}

// IsModel reports whether s is a model name: 1 to 128 bytes of printable
// ASCII without spaces, not starting with '-' (so it never reads as a flag).
func IsModel(s string) bool {
	return len(s) <= MaxModelLen && isGraphicString(s) && s[0] != '-'
}

// isGraphicString reports whether s is non-empty printable ASCII without
// spaces, of any length.
func isGraphicString(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isGraphic(s[i]) {
			return false
		}
	}
	return true
}

// IsEffort reports whether s matches [a-z0-9][a-z0-9._-]* and is at most 64
// bytes.
func IsEffort(s string) bool {
	if len(s) == 0 || len(s) > MaxEffortLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		lowerAlnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !lowerAlnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// IsRole reports whether s is one of the eight roles.
func IsRole(s string) bool {
	switch s {
	case RoleChefOwner, RoleSousChef, RoleStationCook, RoleCommis,
		RoleExpediter, RoleGardener, RoleDishwasher, RoleInspector:
		return true
	}
	return false
}

// IsAgentFamily reports whether s is claude or codex.
func IsAgentFamily(s string) bool { return s == AgentClaude || s == AgentCodex }

// IsResourceKind reports whether s is one of the five resource kinds.
func IsResourceKind(s string) bool {
	switch s {
	case KindWorker, KindWorktree, KindTerminal, KindBranch, KindSchedule:
		return true
	}
	return false
}

// IsOp reports whether s is one of the five worker effect types.
func IsOp(s string) bool {
	switch s {
	case OpLaunch, OpMessage, OpReply, OpCancel, OpRelease:
		return true
	}
	return false
}

// IsMessageKind reports whether s is one of the five mailbox message kinds.
func IsMessageKind(s string) bool {
	switch s {
	case MsgQuestion, MsgWorkerDone, MsgEscalation, MsgHeartbeat, MsgStatus:
		return true
	}
	return false
}

// IsOutcome reports whether s is succeeded, failed or cancelled.
func IsOutcome(s string) bool {
	return s == OutcomeSucceeded || s == OutcomeFailed || s == OutcomeCancelled
}

// IsReason reports whether s is one of the five not-applied reasons.
func IsReason(s string) bool {
	switch s {
	case ReasonRejected, ReasonRateLimited, ReasonUnsupported, ReasonCrossHouse, ReasonForeignBackend:
		return true
	}
	return false
}

// Validate checks that r is a well-formed resource: a known kind, an
// identifier backend and a reference handle. The message names the failing
// field, never its value.
func (r Resource) Validate() error { return r.validate("resource") }

func (r Resource) validate(path string) error {
	switch {
	case !IsResourceKind(r.Kind):
		return invalidf(path+".kind", "must be one of worker, worktree, terminal, branch, schedule")
	case !IsIdentifier(r.Backend):
		return invalidf(path+".backend", msgIdentifier)
	case !IsReference(r.Handle):
		return invalidf(path+".handle", msgReference)
	}
	return nil
}

// Messages for the common limits, shared by decoders and encoders.
const (
	msgIdentifier = "must be an identifier (1 to 64 letters, digits, '-' or '_', starting with a letter or digit)"
	msgReference  = "must be 1 to 256 bytes of printable ASCII without spaces"
	msgText       = "must be 1 byte to 64 KiB of UTF-8 without NUL"
	msgBranch     = "must be a branch name git accepts (check-ref-format --branch), printable ASCII, at most 255 bytes"
	msgModel      = "must be 1 to 128 bytes of printable ASCII without spaces, not starting with '-'"
	msgEffort     = "must match [a-z0-9][a-z0-9._-]* and be at most 64 bytes"
	msgCommit     = "must be a commit id of 40 or 64 lowercase hex digits"
	msgReportPath = "must be a relative path of 1 to 4096 bytes of UTF-8 without NUL or '..' components"
	msgRole       = "must be one of chef-owner, sous-chef, station-cook, commis, expediter, gardener, dishwasher, inspector"
	msgAgent      = "must be claude or codex"
)

// invalidf is an Invalid error about one field; msg must never hold a value
// from the request.
func invalidf(path, msg string) error {
	return galleyerr.E(galleyerr.Invalid, path+": "+msg)
}
