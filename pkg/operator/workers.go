package operator

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/store"
)

// WorkerView is one row of the worker list.
type WorkerView struct {
	Handle     string       `json:"handle"`
	State      string       `json:"state"`
	Outcome    string       `json:"outcome,omitempty"`
	Released   bool         `json:"released,omitempty"`
	Created    time.Time    `json:"created"`
	AgeSeconds int64        `json:"ageSeconds"`
	Agent      string       `json:"agent,omitempty"`
	Model      string       `json:"model,omitempty"`
	Branch     string       `json:"branch,omitempty"`
	Run        string       `json:"run"`
	Task       string       `json:"task"`
	Role       string       `json:"role,omitempty"`
	Tokens     *TokensView  `json:"tokens,omitempty"`
	Cost       *CostView    `json:"cost,omitempty"`
	LastEvent  *store.Event `json:"lastEvent,omitempty"`

	// Parked is set while the worker is parked (docs/parking.md): it
	// observes awaiting-reply, and its compute has ended until input
	// resumes it.
	Parked      bool       `json:"parked,omitempty"`
	ParkedSince *time.Time `json:"parkedSince,omitempty"`
}

// TokensView is a worker's token counts so far; nil is unknown.
type TokensView struct {
	Input      *int64 `json:"input,omitempty"`
	Output     *int64 `json:"output,omitempty"`
	CacheRead  *int64 `json:"cacheRead,omitempty"`
	CacheWrite *int64 `json:"cacheWrite,omitempty"`
}

// CostView is a worker's cost so far in millionths of a US dollar.
type CostView struct {
	MicroUSD int64  `json:"microUsd"`
	Basis    string `json:"basis"`
}

// WorkersAnswer answers GET PathWorkers.
type WorkersAnswer struct {
	Workers []WorkerView `json:"workers"`
}

func (h *Handler) workers(w http.ResponseWriter, r *http.Request) {
	views, err := h.List(r.Context())
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, WorkersAnswer{Workers: views})
}

// List builds the worker list, newest first. The last events are read
// 16 at a time.
func (h *Handler) List(ctx context.Context) ([]WorkerView, error) {
	rs, err := h.svc.OperatorWorkers(ctx)
	if err != nil {
		return nil, err
	}
	now := h.now()
	views := make([]WorkerView, len(rs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, res := range rs {
		wk := res.Worker
		v := WorkerView{Handle: res.Handle, State: wk.State, Outcome: wk.Outcome, Released: res.Released,
			Created: res.Created, AgeSeconds: int64(now.Sub(res.Created) / time.Second), Branch: wk.Branch,
			Run: wk.Run, Task: wk.Task, Role: wk.Role}
		if wk.Agent != nil {
			v.Agent, v.Model = wk.Agent.Agent, wk.Agent.Model
		}
		if wk.Parked() {
			since := wk.Park.Since
			v.Parked, v.ParkedSince = true, &since
		}
		if u := wk.Usage; u != nil {
			if u.Model != "" {
				v.Model = u.Model
			}
			if t := u.Tokens; t != nil {
				v.Tokens = &TokensView{Input: t.Input, Output: t.Output, CacheRead: t.CacheRead, CacheWrite: t.CacheWrite}
			}
			if c := u.Cost; c != nil {
				v.Cost = &CostView{MicroUSD: c.Amount, Basis: c.Basis}
			}
		}
		views[len(rs)-1-i] = v
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if e, ok, err := h.events.LastEvent(ctx, views[i].Handle); err == nil && ok {
				views[i].LastEvent = &e
			}
		}(len(rs) - 1 - i)
	}
	wg.Wait()
	return views, nil
}
