package ecsrt

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tag keys RunTask puts on every worker task, for operators and for the
// reconciler, beside the house's (contract.TagHouse).
const (
	TagRun    = "galley:run"
	TagWorker = "galley:worker"
	TagKey    = "galley:key"
)

// startedBy prefixes: a handle that fits is carried as is after
// startedByPrefix; one that does not is hashed after hashedPrefix. The two
// differ at their seventh character, so no handle's literal form can be
// another's hashed form.
const (
	startedByPrefix = "galley-"
	hashedPrefix    = "galleyh-"
	// MaxStartedBy is the length startedBy is kept to: ECS once allowed 36
	// characters and now allows 128; 36 works everywhere.
	MaxStartedBy = 36
)

// startedByChars is what ECS allows in startedBy.
var startedByChars = regexp.MustCompile(`^[A-Za-z0-9_/-]+$`)

// StartedBy returns the startedBy value of handle's task: "galley-<handle>"
// when that fits ECS's 36 characters of letters, digits, '-', '_' and '/',
// else "galleyh-" and a hash of the handle. It is what ListTasks filters
// on, so it must be a pure function of the handle.
func StartedBy(handle string) string {
	if s := startedByPrefix + handle; len(s) <= MaxStartedBy && startedByChars.MatchString(handle) {
		return s
	}
	h := sha256.Sum256([]byte(handle))
	return hashedPrefix + hex.EncodeToString(h[:])[:MaxStartedBy-len(hashedPrefix)]
}

// HandleFromStartedBy returns the handle a startedBy value carries. ok is
// false for a value galley did not write, or for a hashed one (then the
// handle is in the task's galley:worker tag).
func HandleFromStartedBy(startedBy string) (handle string, ok bool) {
	h, found := strings.CutPrefix(startedBy, startedByPrefix)
	if !found || h == "" || StartedBy(h) != startedBy {
		return "", false
	}
	return h, true
}

// IsGalleyStartedBy reports whether startedBy has the form galley writes,
// literal or hashed.
func IsGalleyStartedBy(startedBy string) bool {
	return strings.HasPrefix(startedBy, startedByPrefix) || strings.HasPrefix(startedBy, hashedPrefix)
}

// MaxClientToken is the longest clientToken RunTask takes.
const MaxClientToken = 64

// ClientToken returns the RunTask clientToken for an idempotency token: the
// token itself when ECS takes it (1 to 64 ASCII characters from '!' to '~'),
// else a hash of it, so that any token still converges on one task.
func ClientToken(idem string) string {
	if idem != "" && len(idem) <= MaxClientToken && printableASCII(idem) {
		return idem
	}
	h := sha256.Sum256([]byte(idem))
	return "galleyh-" + hex.EncodeToString(h[:])[:MaxClientToken-len("galleyh-")]
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 {
			return false
		}
	}
	return true
}

// MaxTagValue is the longest tag value ECS takes, in characters.
const MaxTagValue = 256

// TagValue makes v acceptable as an ECS tag value: characters outside
// letters, digits, spaces and "+-=._:/@" become '_', the value is cut to 256
// characters, and a value starting with the reserved "aws:" (in any case)
// gets a leading '_'. Tags are labels for operators, so a lossy form is fine.
func TagValue(v string) string {
	var b strings.Builder
	n := 0
	for _, r := range v {
		if n == MaxTagValue {
			break
		}
		if !tagRune(r) {
			r = '_'
		}
		b.WriteRune(r)
		n++
	}
	s := b.String()
	if len(s) >= 4 && strings.EqualFold(s[:4], "aws:") {
		s = "_" + s
		if utf8.RuneCountInString(s) > MaxTagValue {
			_, size := utf8.DecodeLastRuneInString(s)
			s = s[:len(s)-size]
		}
	}
	return s
}

func tagRune(r rune) bool {
	if r == utf8.RuneError {
		return false
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == ' ' || strings.ContainsRune("+-=._:/@", r)
}
