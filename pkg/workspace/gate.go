package workspace

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// UseGate makes the clone at dir fetch from and push to gateURL (a
// worker's push gate, see package gitserve) wherever it would reach
// repoURL, by url.<gateURL>.insteadOf=<repoURL> in the clone's config;
// remote.origin.url stays repoURL. It is idempotent, and checks that git
// resolves origin to the gate for fetch and push alike (another insteadOf
// or a pushurl would win otherwise: Conflict). Call it after Prepare, whose
// Scrub removes every url.* setting. gateURL holds no credential: the
// agent authenticates to the gate through its environment.
func UseGate(ctx context.Context, dir, repoURL, gateURL string) error {
	const op = galleyerr.Op("workspace.UseGate")
	if err := checkURL(repoURL); err != nil {
		return galleyerr.E(op, err)
	}
	u, err := url.Parse(gateURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !clean(gateURL) {
		return galleyerr.E(op, galleyerr.Invalid, "the gate URL must be an http(s) URL")
	}
	if u.User != nil {
		return galleyerr.E(op, galleyerr.Invalid, "the gate URL must not carry credentials")
	}
	if gateURL == repoURL {
		return galleyerr.E(op, galleyerr.Invalid, "the gate URL is the repository URL")
	}
	dir, err = cleanDir(dir)
	if err != nil {
		return galleyerr.E(op, err)
	}
	if err := verifyTop(ctx, dir); err != nil {
		return galleyerr.E(op, err)
	}
	if err := setConfig(ctx, dir, "url."+gateURL+".insteadOf", repoURL, true); err != nil {
		return galleyerr.E(op, err)
	}
	for _, how := range []string{"--all", "--push"} {
		out, err := inRepo(ctx, dir, nil, "remote", "get-url", how, "origin")
		if err != nil {
			return galleyerr.E(op, galleyerr.Other, "resolve origin", err)
		}
		if got := strings.TrimSpace(out); got != gateURL {
			return galleyerr.E(op, galleyerr.Conflict, fmt.Sprintf("%s: origin resolves to another URL than the gate (%s)", dir, how))
		}
	}
	return nil
}
