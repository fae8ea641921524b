package gitserve

import (
	"errors"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// maxBody bounds a request body Backend spools to disk (see spool) and one
// PushGate forwards: far above any push a worker makes, far below a disk.
const maxBody = 1 << 30

// Backend serves the bare repository at repoDir over git's smart HTTP
// protocol (fetch and push) by running `git http-backend` through
// net/http/cgi. The URL path below the handler's mount is ignored except for
// the service suffixes (/info/refs, /git-upload-pack, /git-receive-pack).
//
// Pushes are enabled for every request that reaches it (http.receivepack),
// so authentication is the job of a handler in front (BasicAuth). The
// backend runs without the machine's system and global git configuration,
// so what it serves does not depend on who runs it.
func Backend(repoDir string) http.Handler {
	abs, err := filepath.Abs(repoDir)
	if err != nil {
		abs = repoDir
	}
	return &backend{dir: abs}
}

type backend struct{ dir string }

// httpBackend finds git-http-backend in git's exec path once.
var httpBackend = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", errors.New("git --exec-path failed: is git installed?")
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("git-http-backend is not in git's exec path")
	}
	return p, nil
})

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep, ok := checkRequest(w, r)
	if !ok {
		return
	}
	path, err := httpBackend()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	r = r.Clone(r.Context())
	r.URL.Path, r.URL.RawPath = ep, ""
	r.Header.Del("Authorization") // not into the CGI environment
	if r.Method == http.MethodPost && r.ContentLength < 0 {
		// net/http/cgi refuses chunked bodies, which git sends for a
		// request larger than its http.postBuffer: spool it to learn its
		// length.
		f, n, err := spool(r.Body)
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, errTooLarge) {
				status = http.StatusRequestEntityTooLarge
			}
			http.Error(w, err.Error(), status)
			return
		}
		defer f.Close()
		r.Body, r.ContentLength, r.TransferEncoding = f, n, nil
	}
	h := &cgi.Handler{
		Path: path,
		Dir:  b.dir,
		Env: []string{
			// PATH_INFO is just the endpoint, so the repository is the root.
			"GIT_PROJECT_ROOT=" + b.dir,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_CONFIG_COUNT=2",
			"GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true",
			"GIT_CONFIG_KEY_1=http.getanyfile", "GIT_CONFIG_VALUE_1=false",
		},
	}
	h.ServeHTTP(w, r)
}

// checkRequest answers requests that are not smart HTTP (404) or use the
// wrong method (405), and returns the endpoint of the others.
func checkRequest(w http.ResponseWriter, r *http.Request) (string, bool) {
	ep := endpoint(r.URL.Path)
	switch ep {
	case "":
		http.NotFound(w, r)
		return "", false
	case infoRefs:
		if s := r.URL.Query().Get("service"); s != "git-upload-pack" && s != "git-receive-pack" {
			http.Error(w, "only git's smart HTTP protocol is served", http.StatusForbidden)
			return "", false
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return "", false
		}
	default:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return "", false
		}
	}
	return ep, true
}

var errTooLarge = errors.New("request body too large")

// spool copies body, at most maxBody bytes, into an unlinked temporary
// file and returns it rewound, with its length.
func spool(body io.Reader) (*os.File, int64, error) {
	f, err := os.CreateTemp("", "gitserve-body-")
	if err != nil {
		return nil, 0, err
	}
	os.Remove(f.Name()) // the open file is enough
	n, err := io.Copy(f, io.LimitReader(body, maxBody+1))
	if err == nil && n > maxBody {
		err = errTooLarge
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		if !errors.Is(err, errTooLarge) {
			err = errors.New("could not read the request body")
		}
		return nil, 0, err
	}
	return f, n, nil
}
