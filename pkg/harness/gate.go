package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/workerapi"
)

// GateUser is the user name the agent presents to its push gate, with the
// gate's per-session secret.
const GateUser = "galley-agent"

// gateRealm is what the gate's 401 challenge names.
const gateRealm = "galley worker push gate"

// gatePath is the repository's path on the gate; it means nothing to the
// handlers (they route by the smart-HTTP suffix) but makes a readable URL.
const gatePath = "/house.git"

// pushGate is the agent's way to the house repository: a smart-HTTP server
// on 127.0.0.1 that accepts only requests carrying its per-session secret,
// lets pushes of the worker's branch through and refuses every other ref,
// and forwards to the house repository with the house git credential
// (which the agent never holds), or serves a local repository itself.
type pushGate struct {
	url string
	// env gives git the gate's credential: an http.<url>.extraHeader
	// setting in the agent's environment only, never on disk or in argv.
	env []string
	srv *http.Server
}

func (g *pushGate) close() { _ = g.srv.Close() }

// startGate starts the push gate for repoURL (a local path, file:// URL, or
// http(s) URL) and branch ("" allows no push).
func (h *harness) startGate(repoURL, branch string) (*pushGate, error) {
	upstream, err := h.gateUpstream(repoURL)
	if err != nil {
		return nil, err
	}
	b := h.cfg.Budgets.withDefaults()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	secret := hex.EncodeToString(raw)
	handler := gitserve.BasicAuth(gateRealm, gitserve.Credential(GateUser, secret),
		gitserve.BudgetedPushGate(h.reportPushes(gitserve.OnlyBranch(branch)), gitserve.NewBudget(h.cfg.PushLimit, h.cfg.PushBudget), upstream,
			gitserve.WithPushesInFlight(b.PushesInFlight), gitserve.WithBodyTimeout(b.PushTimeout)))
	ln, err := h.listenForAgent("push gate")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: maxHeaderBytes}
	go func() { _ = srv.Serve(limitConns(ln, srv, h.log)) }()
	gateURL := "http://" + ln.Addr().String() + gatePath
	auth := base64.StdEncoding.EncodeToString([]byte(GateUser + ":" + secret))
	return &pushGate{
		url: gateURL,
		env: []string{
			"GIT_CONFIG_COUNT=1",
			"GIT_CONFIG_KEY_0=http." + gateURL + ".extraHeader",
			"GIT_CONFIG_VALUE_0=Authorization: Basic " + auth,
		},
		srv: srv,
	}, nil
}

// reportPushes reports every ref update policy decides to the worker's
// event log.
func (h *harness) reportPushes(policy gitserve.RefPolicy) gitserve.RefPolicy {
	return func(u gitserve.RefUpdate) error {
		err := policy(u)
		if err != nil {
			h.rep.report(workerapi.EventPush, "push refused: "+err.Error(), "ref", u.Ref, "commit", u.New)
		} else {
			h.rep.report(workerapi.EventPush, "push", "ref", u.Ref, "commit", u.New)
		}
		return err
	}
}

// gateUpstream is where the gate forwards: the house repository over
// http(s) with the house git credential, or a local bare repository
// served by git http-backend.
func (h *harness) gateUpstream(repoURL string) (http.Handler, error) {
	switch {
	case strings.HasPrefix(repoURL, "https://"), strings.HasPrefix(repoURL, "http://"):
		// Without a credential the gate forwards unauthenticated: a public
		// repository can be fetched, and a refusal comes back as a 502
		// naming the house credential.
		cred := h.cfg.GitCredential
		var opts []gitserve.UpstreamOption
		if h.cfg.ownProxy != nil {
			opts = append(opts, gitserve.ViaProxy(h.cfg.ownProxy))
		}
		return gitserve.Upstream(repoURL, h.cfg.GitUsername, func(context.Context) (string, error) { return cred, nil }, opts...)
	case strings.HasPrefix(repoURL, "file://"):
		u, err := url.Parse(repoURL)
		if err != nil || u.Path == "" || (u.Host != "" && u.Host != "localhost") {
			return nil, errors.New("the repository's file URL names no local path")
		}
		return gitserve.Backend(u.Path), nil
	case filepath.IsAbs(repoURL):
		return gitserve.Backend(repoURL), nil
	}
	// ssh and scp-like addresses would need the credential in the agent's
	// reach; relative paths depend on a working folder.
	return nil, fmt.Errorf("the push gate serves https, http, file:// and absolute local repositories, not %q", redactURL(repoURL))
}

// redactURL drops user info a repository address might carry.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(s, "@"); at >= 0 {
		return "…" + s[at:]
	}
	return s
}

// limitConns bounds the connections the agent may hold to one of the
// harness's servers (the push gate, the MCP server), so that a flood of
// them cannot take the harness's descriptors (pkg/connlimit).
func limitConns(ln net.Listener, srv *http.Server, log *slog.Logger) net.Listener {
	lim := connlimit.Wrap(ln, connlimit.Limits{PerPeer: harnessConns, Total: harnessConns}, log)
	lim.Install(srv)
	return lim
}

// harnessConns is how many connections the agent may hold to each of the
// harness's servers: far more than an agent's git and MCP client open.
const harnessConns = 256

// The push budget's defaults (gitserve.Budget), of one push's pack
// (contract.EnvPushLimit) and of all of a worker's pushes
// (contract.EnvPushBudget). A worker's pushes go to its own branch only,
// but each one's pack stays in the house repository until git collects
// it, referenced or not (a force-push's old commits): the budget bounds
// what one worker adds there.
const (
	DefaultPushLimit  = 100 << 20
	DefaultPushBudget = 512 << 20
)

// pushBudgetFromEnv reads contract.EnvPushLimit and EnvPushBudget: 0 when
// unset (the defaults apply), an error when not a positive number of
// bytes.
func pushBudgetFromEnv(getenv func(string) string) (limit, budget int64, err error) {
	for _, v := range []struct {
		name string
		to   *int64
	}{{contract.EnvPushLimit, &limit}, {contract.EnvPushBudget, &budget}} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil || n <= 0 {
			return 0, 0, fmt.Errorf("%s must be a positive number of bytes", v.name)
		}
		*v.to = n
	}
	return limit, budget, nil
}
