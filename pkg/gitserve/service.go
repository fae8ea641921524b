package gitserve

import "strings"

// The smart-HTTP endpoints, by the suffix of the URL path.
const (
	infoRefs    = "/info/refs"
	uploadPack  = "/git-upload-pack"
	receivePack = "/git-receive-pack"
)

// endpoint returns the smart-HTTP suffix path ends with, or "". Every
// handler here routes by it, so they agree on which requests are pushes.
func endpoint(path string) string {
	for _, s := range []string{infoRefs, uploadPack, receivePack} {
		if strings.HasSuffix(path, s) {
			return s
		}
	}
	return ""
}
