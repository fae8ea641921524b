// Package remote is service.GitHost for a house repository on a git server
// reached over smart HTTP(S), such as GitHub: what galley uses on AWS,
// where the Lambda runtime has no git command and no local clone.
//
// It speaks the git protocol itself (go-git's transport, no working
// copy, no objects fetched). Reading a branch is a reference advertisement
// (git ls-remote). Creating one sends git receive-pack a single command,
// "<zero> <commit> refs/heads/<branch>", with an empty pack: the commit is
// the default branch's head, which the server has, and the zero old value
// makes the server's ref transaction create the branch only if it does not
// exist, atomically against every other pusher (git push
// --force-with-lease=refs/heads/<branch>: would send the same command).
// Deleting sends "<current> <zero>", which the server applies only if the
// branch still points where it was read.
//
// The credential (a token, sent as HTTP basic auth the way GitHub takes
// it) comes from a function asked per call, so a rotated secret is picked
// up; it is never put in a URL, an error or a log line.
package remote

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/gitexec"
)

// TokenFunc returns the git credential; "" means none (a public
// repository, for reads).
type TokenFunc func(ctx context.Context) (string, error)

// Repo is a remote house repository.
type Repo struct {
	url      string
	token    TokenFunc
	user     string
	client   transport.Transport
	redacted string
}

// Option configures a Repo.
type Option func(*Repo)

// WithHTTPClient sets the HTTP client (default http.DefaultClient).
func WithHTTPClient(c *http.Client) Option {
	return func(r *Repo) { r.client = githttp.NewClient(c) }
}

// WithUser sets the basic-auth user name sent with the token (default
// "x-access-token", which GitHub accepts with any token).
func WithUser(u string) Option { return func(r *Repo) { r.user = u } }

// New returns the repository at rawURL (https://, or http:// for tests on
// loopback). A URL with user information is refused: the credential comes
// from token only.
func New(rawURL string, token TokenFunc, opts ...Option) (*Repo, error) {
	const op = galleyerr.Op("remote.new")
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, galleyerr.E(op, galleyerr.Invalid, "the repository is not a valid URL")
	}
	if u.User != nil {
		return nil, galleyerr.E(op, galleyerr.Invalid, "the repository URL must not hold credentials: "+gitexec.Redact(rawURL))
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, galleyerr.E(op, galleyerr.Unsupported, "only http(s) repositories are served: "+u.Scheme)
	}
	if _, err := transport.NewEndpoint(rawURL); err != nil {
		return nil, galleyerr.E(op, galleyerr.Invalid, "the repository URL", err)
	}
	if token == nil {
		token = func(context.Context) (string, error) { return "", nil }
	}
	r := &Repo{url: rawURL, token: token, user: contract.DefaultGitUsername, client: githttp.DefaultClient, redacted: u.Redacted()}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

func (r *Repo) auth(ctx context.Context) (transport.AuthMethod, error) {
	tok, err := r.token(ctx)
	if err != nil {
		return nil, galleyerr.E(galleyerr.Unavailable, "the git credential", err)
	}
	if tok == "" {
		return nil, nil
	}
	return &githttp.BasicAuth{Username: r.user, Password: tok}, nil
}

// refs reads the repository's reference advertisement as service sees it.
func (r *Repo) refs(ctx context.Context, service string) (*packp.AdvRefs, transport.ReceivePackSession, error) {
	auth, err := r.auth(ctx)
	if err != nil {
		return nil, nil, err
	}
	// A session rewrites its endpoint on a redirect: each gets its own.
	ep, err := transport.NewEndpoint(r.url)
	if err != nil {
		return nil, nil, galleyerr.E(galleyerr.Invalid, "the repository URL", err)
	}
	var sess transport.Session
	var rp transport.ReceivePackSession
	if service == transport.ReceivePackServiceName {
		rp, err = r.client.NewReceivePackSession(ep, auth)
		sess = rp
	} else {
		sess, err = r.client.NewUploadPackSession(ep, auth)
	}
	if err != nil {
		return nil, nil, r.wrap("connect", err)
	}
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		sess.Close()
		return nil, nil, r.wrap("read references", err)
	}
	if rp == nil {
		sess.Close()
	}
	return ar, rp, nil
}

// wrap classifies a transport error; messages name the repository without
// credentials (there are none in its URL) and never the token.
func (r *Repo) wrap(what string, err error) error {
	kind := galleyerr.Unavailable
	switch {
	case errors.Is(err, transport.ErrRepositoryNotFound):
		kind = galleyerr.NotFound
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		kind = galleyerr.Other
	}
	return galleyerr.E(kind, fmt.Sprintf("%s %s: %s", what, r.redacted, gitexec.Redact(err.Error())))
}

// DefaultHead returns the commit at the head of the default branch.
func (r *Repo) DefaultHead(ctx context.Context) (string, error) {
	ar, _, err := r.refs(ctx, transport.UploadPackServiceName)
	if err != nil {
		return "", err
	}
	if ar.Head != nil && !ar.Head.IsZero() {
		return ar.Head.String(), nil
	}
	// A server that does not advertise HEAD: follow its symref capability.
	for _, v := range ar.Capabilities.Get(capability.SymRef) {
		if src, dst, ok := strings.Cut(v, ":"); ok && src == "HEAD" {
			if h, ok := ar.References[dst]; ok {
				return h.String(), nil
			}
		}
	}
	return "", galleyerr.Errorf(galleyerr.Unavailable, "%s advertises no HEAD (an empty repository?)", r.redacted)
}

// BranchHead returns the commit branch points at, or exists=false.
func (r *Repo) BranchHead(ctx context.Context, branch string) (string, bool, error) {
	if err := githost.ValidateBranch(branch); err != nil {
		return "", false, err
	}
	ar, _, err := r.refs(ctx, transport.UploadPackServiceName)
	if err != nil {
		return "", false, err
	}
	h, ok := ar.References[plumbing.NewBranchReferenceName(branch).String()]
	if !ok {
		return "", false, nil
	}
	return h.String(), true, nil
}

// ExistingBranches reports which of the named branches exist (true in the
// map), from one reference advertisement however many names.
func (r *Repo) ExistingBranches(ctx context.Context, branches []string) (map[string]bool, error) {
	for _, b := range branches {
		if err := githost.ValidateBranch(b); err != nil {
			return nil, err
		}
	}
	exist := make(map[string]bool, len(branches))
	if len(branches) == 0 {
		return exist, nil
	}
	ar, _, err := r.refs(ctx, transport.UploadPackServiceName)
	if err != nil {
		return nil, err
	}
	for _, b := range branches {
		if _, ok := ar.References[plumbing.NewBranchReferenceName(b).String()]; ok {
			exist[b] = true
		}
	}
	return exist, nil
}

// CreateBranch creates branch at commit only if it does not exist;
// galleyerr.Conflict when it does (whoever made it).
func (r *Repo) CreateBranch(ctx context.Context, branch, commit string) error {
	if err := githost.ValidateBranch(branch); err != nil {
		return err
	}
	if !plumbing.IsHash(commit) {
		return galleyerr.Errorf(galleyerr.Invalid, "not a commit id: %q", commit)
	}
	ref := plumbing.NewBranchReferenceName(branch)
	ar, sess, err := r.refs(ctx, transport.ReceivePackServiceName)
	if err != nil {
		return err
	}
	defer sess.Close()
	if _, exists := ar.References[ref.String()]; exists {
		return galleyerr.Errorf(galleyerr.Conflict, "branch %s exists", branch)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	req.Commands = []*packp.Command{{Name: ref, Old: plumbing.ZeroHash, New: plumbing.NewHash(commit)}}
	req.Packfile = io.NopCloser(bytes.NewReader(emptyPack()))
	return r.push(ctx, sess, req, branch)
}

// DeleteBranch deletes branch; deleting a missing branch succeeds.
func (r *Repo) DeleteBranch(ctx context.Context, branch string) error {
	if err := githost.ValidateBranch(branch); err != nil {
		return err
	}
	ref := plumbing.NewBranchReferenceName(branch)
	ar, sess, err := r.refs(ctx, transport.ReceivePackServiceName)
	if err != nil {
		return err
	}
	defer sess.Close()
	cur, exists := ar.References[ref.String()]
	if !exists {
		return nil
	}
	if !ar.Capabilities.Supports(capability.DeleteRefs) {
		return galleyerr.Errorf(galleyerr.Unsupported, "%s does not allow deleting branches", r.redacted)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	req.Capabilities.Set(capability.DeleteRefs)
	req.Commands = []*packp.Command{{Name: ref, Old: cur, New: plumbing.ZeroHash}}
	err = r.push(ctx, sess, req, branch)
	if galleyerr.Is(galleyerr.Conflict, err) {
		// Moved or deleted since it was read: a missing branch is done.
		if _, exists, herr := r.BranchHead(ctx, branch); herr == nil && !exists {
			return nil
		}
	}
	return err
}

// push sends req and reads the server's verdict: a command the server
// refused because the ref was not what req expected is a Conflict.
func (r *Repo) push(ctx context.Context, sess transport.ReceivePackSession, req *packp.ReferenceUpdateRequest, branch string) error {
	rs, err := sess.ReceivePack(ctx, req)
	if err != nil {
		if rs == nil {
			return r.wrap("push", err)
		}
	}
	if rs == nil {
		return nil // no report-status: the server accepted without one
	}
	if rs.UnpackStatus != "" && rs.UnpackStatus != "ok" {
		return galleyerr.Errorf(galleyerr.Other, "push to %s: unpack %s", r.redacted, rs.UnpackStatus)
	}
	for _, cs := range rs.CommandStatuses {
		if cs.Status == "ok" {
			continue
		}
		msg := fmt.Sprintf("push of %s to %s refused: %s", branch, r.redacted, gitexec.Redact(cs.Status))
		if refusedByState(cs.Status) {
			return galleyerr.E(galleyerr.Conflict, msg)
		}
		return galleyerr.E(galleyerr.Other, msg)
	}
	return nil
}

// refusedByState reports whether a refusal says the ref was not in the
// expected state (it exists, moved, or another push holds its lock).
func refusedByState(status string) bool {
	s := strings.ToLower(status)
	for _, p := range []string{"already exists", "stale info", "failed to lock", "cannot lock", "fetch first",
		"non-fast-forward", "reference already exists", "failed to update ref", "is at", "but expected"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// emptyPack is a packfile of no objects: what a push of a commit the
// server already has sends.
func emptyPack() []byte {
	var b bytes.Buffer
	b.WriteString("PACK")
	_ = binary.Write(&b, binary.BigEndian, uint32(2))
	_ = binary.Write(&b, binary.BigEndian, uint32(0))
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}
