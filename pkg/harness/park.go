package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/modelproxy"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Parking (docs/parking.md): an agent that has waited on its coordinator
// for Config.ParkAfter, blocked in its one tool call, is parked. The
// harness saves its session files, freezes its inbox, reports the parking
// to galley and ends, without an exit report; galley starts a new harness
// when input comes, which restores the files and resumes the agent where
// it waited (resume.go).

// Parker is a Driver whose agent can be parked and resumed.
type Parker interface {
	// SessionDir names the folder, relative to the agent's home, that
	// holds the agent's session files (saved at parking, restored before
	// the resume), or "" for an agent that keeps none.
	SessionDir() string
	// ResumeCommand builds the command that resumes the agent from fact,
	// the last thing its driver told Events.Resumable; the rest is as
	// Command.
	ResumeCommand(self workerapi.Self, mcpURL, mcpSecret, workspace, fact string) (*exec.Cmd, error)
}

// DefaultParkLimits bound a parking's session archive.
var DefaultParkLimits = snapshot.Limits{MaxBytes: 256 << 20, MaxEntries: 10_000}

// parkName names a worker's session archive among its keys.
const parkName = "session"

// ParkKey is the key of a worker's session archive in the park store:
// galley deletes it once the worker settles.
func ParkKey(house, worker string) string { return snapshot.Key(house, worker, parkName) }

// parkState is what a parked harness keeps for the harness that resumes it
// (workerapi.ParkRequest.State): opaque to galley, bounded by the API.
type parkState struct {
	V int `json:"v"`
	// Fact is the driver's resume fact (the scripted agent's line, a
	// CLI's session id).
	Fact string `json:"fact"`
	// Wait is the tool the agent waited in; Question and AskDigest name
	// the question of an ask_coordinator, so that the resumed agent's
	// same ask takes its reply instead of asking again.
	Wait      string `json:"wait"`
	Question  string `json:"question,omitempty"`
	AskDigest string `json:"askDigest,omitempty"`
	// From is where the resumed harness reads its inbox from: the
	// messages queued and not taken come back.
	From int64 `json:"from"`
	// Session is the session archive's key, "" when none was saved.
	Session string `json:"session,omitempty"`
	// Subject is the question's subject, cut to a line: a CLI resumed
	// with its reply as its prompt is told which question it answers.
	Subject string `json:"subject,omitempty"`
	// Usage is the model proxy's count at the parking: the resumed
	// harness's proxy counts on from it, so that usage reports stay
	// totals across the gap.
	Usage *modelproxy.Totals `json:"usage,omitempty"`
}

// askDigest identifies an ask by its subject and body.
func askDigest(subject, body string) string {
	sum := sha256.Sum256([]byte(subject + "\x00" + body))
	return hex.EncodeToString(sum[:])
}

// waiting is one blocking tool call of the agent's.
type waiting struct {
	tool      string
	question  string // an ask's question, once posted
	subject   string
	askDigest string
	since     time.Time
}

// parkWatch follows the agent's blocking calls and the driver's resume
// fact, and says when the agent may be parked.
type parkWatch struct {
	mu      sync.Mutex
	n       int
	waits   map[int]*waiting
	fact    string
	parking bool // a parking is under way (or done): calls are refused, an ask's end is not an abandon
	// notBefore delays the next try after one that failed.
	notBefore time.Time
}

func (p *parkWatch) wait(tool, question, subject, digest string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waits == nil {
		p.waits = map[int]*waiting{}
	}
	p.n++
	p.waits[p.n] = &waiting{tool: tool, question: question, subject: cutText(subject, maxAbandonedSubject), askDigest: digest, since: time.Now()}
	return p.n
}

func (p *parkWatch) done(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waits, id)
}

func (p *parkWatch) setFact(f string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fact = f
}

func (p *parkWatch) isParking() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parking
}

// candidate answers the one wait to park in, when the agent has waited in
// exactly one blocking call, and no other, for at least after, and its
// driver said where it is.
func (p *parkWatch) candidate(after time.Duration, calls int) (waiting, string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parking || len(p.waits) != 1 || calls != 1 || p.fact == "" || time.Now().Before(p.notBefore) {
		return waiting{}, "", false
	}
	for _, w := range p.waits {
		if time.Since(w.since) >= after && (w.tool != ToolAsk || w.question != "") {
			return *w, p.fact, true
		}
	}
	return waiting{}, "", false
}

// inFlight is the number of tool calls running.
func (l *liveRequests) inFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.callsInFlight
}

// watchPark tries to park the agent every second once it may be, until
// ctx ends or it is parked (h.parked closed).
func (h *harness) watchPark(ctx context.Context, parker Parker, j *jail) {
	if h.cfg.ParkAfter <= 0 {
		return
	}
	if parker.SessionDir() != "" && h.cfg.Parks == nil {
		h.log.Warn("parking is off: the agent keeps session files and no park store is set")
		return
	}
	tick := time.NewTicker(min(time.Second, h.cfg.ParkAfter/2))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if h.finishing.Load() || h.isSettled() {
			return
		}
		w, fact, ok := h.parks.candidate(h.cfg.ParkAfter, h.calls.inFlight())
		if !ok {
			continue
		}
		if h.park(ctx, parker, j, w, fact) {
			close(h.parked)
			return
		}
	}
}

// park parks the agent waiting in w: save, freeze, report. It answers
// true when the parking landed (or galley settled the worker meanwhile:
// either way the agent is to be stopped and nothing reported); on false
// the worker goes on as before and the parking is tried again after
// another ParkAfter.
func (h *harness) park(ctx context.Context, parker Parker, j *jail, w waiting, fact string) bool {
	h.parks.mu.Lock()
	h.parks.parking = true
	h.parks.mu.Unlock()
	failed := func(why string, err error) bool {
		msg := why
		if err != nil {
			msg += ": " + redactSecrets(err.Error(), h.secrets()...)
		}
		h.log.Warn("the agent was not parked; it goes on waiting", "reason", msg)
		h.rep.report(workerapi.EventError, "the worker was not parked: "+msg)
		h.parks.mu.Lock()
		h.parks.parking = false
		h.parks.notBefore = time.Now().Add(h.cfg.ParkAfter)
		h.parks.mu.Unlock()
		return false
	}
	n := 1
	if r := h.self.Resume; r != nil {
		n = r.Parking + 1
	}
	h.log.Info("parking the agent", "parking", n, "tool", w.tool, "question", w.question, "waited", time.Since(w.since).Round(time.Second))
	st := parkState{V: 1, Fact: fact, Wait: w.tool, Question: w.question, Subject: w.subject, AskDigest: w.askDigest}
	// 1. Save, while the agent is blocked in its call: a failure changes
	// nothing.
	if dir := parker.SessionDir(); dir != "" {
		key := ParkKey(h.cfg.House, h.self.Handle)
		src := sessionPath(j, dir)
		if _, err := os.Lstat(src); err == nil {
			sctx, cancel := context.WithTimeout(ctx, snapshotPatience)
			stats, err := snapshot.SaveTo(sctx, h.cfg.Parks, key, src, h.parkLimits())
			cancel()
			if err != nil {
				return failed("its session files could not be saved", err)
			}
			st.Session = key
			h.log.Info("session files saved", "files", stats.Files, "bytes", stats.Bytes)
		}
	}
	// 2. Freeze: nothing more reaches the agent once the parking may land.
	read, from, ok := h.box.freeze(w.question)
	if !ok {
		return failed("its input came as it parked", nil)
	}
	st.From = from
	// The model proxy's count, with every call the agent made counted
	// (it is blocked in its wait: none is in flight), reported now and
	// kept for the resumed proxy.
	st.Usage = h.model.parkCount()
	state, err := json.Marshal(st)
	if err != nil || len(state) > workerapi.MaxParkState {
		h.box.thaw()
		return failed("its state is too large", err)
	}
	// 3. Report. The call is idempotent; an answer that never came is
	// settled by the record.
	req := workerapi.ParkRequest{Parking: n, Read: read, State: state}
	err = h.untilReachable(ctx, "reporting the parking", 30*time.Second, func(ctx context.Context) error {
		return h.api.Park(ctx, req)
	})
	if galleyerr.Is(galleyerr.Unavailable, err) || (err != nil && ctx.Err() != nil) {
		err = h.parkLanded(ctx, n, err)
	}
	switch {
	case err == nil:
		h.log.Info("parked: the agent is stopped and the harness ends", "parking", n, "read", read)
		h.rep.report(workerapi.EventWorkspace, "parked", "parking", strconv.Itoa(n))
		return true
	case galleyerr.Is(galleyerr.Conflict, err):
		h.log.Info("the worker settled as it parked", "err", err)
		return true
	}
	h.box.thaw()
	return failed("galley did not take the parking", err)
}

// parkLanded reads the worker's record to learn whether parking n landed
// after its report went unanswered: nil if it did, the report's error if
// not.
func (h *harness) parkLanded(ctx context.Context, n int, reportErr error) error {
	var self workerapi.Self
	err := h.untilReachable(context.WithoutCancel(ctx), "reading whether the parking landed", SelfPatience, func(ctx context.Context) (err error) {
		self, err = h.api.Self(ctx)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("%w (and whether it landed is unknown: %v)", reportErr, err)
	case self.Parked == n:
		return nil
	}
	return reportErr
}

func (h *harness) parkLimits() snapshot.Limits {
	l := h.cfg.ParkLimits
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultParkLimits.MaxBytes
	}
	if l.MaxEntries == 0 {
		l.MaxEntries = DefaultParkLimits.MaxEntries
	}
	return l
}

// sessionPath is where a driver's session folder is: dir itself when
// absolute (the CLI's configuration folder named in the environment),
// else dir in the agent's home.
func sessionPath(j *jail, dir string) string {
	if filepath.IsAbs(dir) {
		return filepath.Clean(dir)
	}
	return filepath.Join(agentHome(j), dir)
}

// agentHome is the agent's home: the jail's, or the harness's own for an
// agent run unconfined.
func agentHome(j *jail) string {
	if j != nil && j.home != "" {
		return j.home
	}
	home, _ := os.UserHomeDir()
	return home
}
