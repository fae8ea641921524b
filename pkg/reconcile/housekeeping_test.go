package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/metrics"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

var _ reconcile.Gauger = (*service.Service)(nil)

// tick is the housekeeping event EventBridge sends for the schedule, at
// the RFC 3339 time at.
func tick(id, at string) []byte {
	b, _ := json.Marshal(map[string]any{
		"version": "0", "id": id, "detail-type": "Scheduled Event", "source": "aws.events",
		"account": "000000000000", "time": at, "region": "us-east-1",
		"resources": []string{"arn:aws:events:us-east-1:000000000000:rule/galley-main-housekeeping"}, "detail": map[string]any{},
	})
	return b
}

// gauges reads the EMF lines of out: each line's gauges, in order.
func gauges(t *testing.T, out *bytes.Buffer) []map[string]float64 {
	t.Helper()
	var all []map[string]float64
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		ds, ok := metrics.Parse([]byte(line))
		if !ok {
			t.Fatalf("not an EMF line: %s", line)
		}
		g := map[string]float64{}
		for _, d := range ds {
			if d.Namespace != contract.MetricNamespace || len(d.Dimensions) != 1 || d.Dimensions[contract.MetricDimHouse] != "origin89" ||
				d.Unit != metrics.UnitCount {
				t.Fatalf("data point %+v, want namespace galley, House=origin89, Count", d)
			}
			g[d.Name] = d.Value
		}
		all = append(all, g)
	}
	return all
}

// On a 5-minute schedule every tick emits the gauges, counted from the
// store; only the tick in each hour's first five minutes sweeps, decided
// by the time EventBridge scheduled it, so a redelivered tick decides the
// same.
func TestHousekeepingGaugesEveryTickSweepsHourly(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st) // one worker, starting, launched now
		launched := e.clock.Now()
		sw := &fakeSweeper{n: 1}
		var out, logs bytes.Buffer
		e.rec = reconcile.New(e.svc, st, reconcile.WithClock(e.clock.Now), reconcile.WithSweeper(sw, 24*time.Hour),
			reconcile.WithGauges(e.svc, "origin89"), reconcile.WithMetrics(&out),
			reconcile.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))

		// Two hours of ticks of a rule created at 21:57:30: EventBridge
		// schedules them at 22:02, 22:07, ... 23:57.
		start := time.Date(2023, 11, 14, 22, 2, 0, 0, time.UTC)
		var swept []string
		for i := range 24 {
			at := start.Add(time.Duration(i) * 5 * time.Minute)
			before := sw.calls
			e.deliver(tick("ev-tick", at.Format(time.RFC3339)))
			if sw.calls > before {
				swept = append(swept, at.Format("15:04"))
			}
			g := gauges(t, &out)
			if len(g) != i+1 {
				t.Fatalf("tick %d: %d EMF lines, want one per tick", i, len(g))
			}
			wantStuck := 0.0
			if e.clock.Now().Sub(launched) > service.StartingStaleAfter {
				wantStuck = 1 // still starting past the bootstrap TTL
			}
			if last := g[i]; last[contract.MetricLiveWorkers] != 1 || last[contract.MetricStuckWorkers] != wantStuck || len(last) != 2 {
				t.Fatalf("tick %d (%v after the launch): gauges %v, want 1 live, %v stuck", i, e.clock.Now().Sub(launched), last, wantStuck)
			}
			e.clock.Advance(5 * time.Minute)
		}
		if strings.Join(swept, " ") != "22:02 23:02" {
			t.Errorf("swept at %v, want 22:02 and 23:02", swept)
		}
		if !strings.Contains(logs.String(), `"msg":"worker gauges","event":"ev-tick","live":1,"stuck":1`) {
			t.Errorf("log lacks the gauges: %s", logs.String())
		}

		// A redelivered copy of a sweeping tick sweeps again (at least once
		// per hour); a copy of another tick does not.
		e.deliver(tick("ev-tick", "2023-11-14T23:02:00Z"))
		e.deliver(tick("ev-tick", "2023-11-14T23:07:00Z"))
		if sw.calls != 3 {
			t.Errorf("after the redeliveries: %d sweeps, want 3", sw.calls)
		}

		// The worker settles: the gauges go to zero.
		e.cancel()
		e.deliver(tick("ev-after", "2023-11-15T00:12:00Z"))
		g := gauges(t, &out)
		if last := g[len(g)-1]; last[contract.MetricLiveWorkers] != 0 || last[contract.MetricStuckWorkers] != 0 {
			t.Errorf("after the cancel: gauges %v, want 0 and 0", last)
		}
	})
}

// Whether a tick sweeps: the first tick period of the hour in UTC, however
// the time is written; a schedule of an hour or more sweeps on every tick;
// an unreadable time falls back to the reconciler's clock.
func TestHousekeepingSweepDue(t *testing.T) {
	clockAt := time.Date(2023, 11, 14, 22, 3, 0, 0, time.UTC)
	tests := []struct {
		at   string
		tick time.Duration // 0: the default
		want bool
	}{
		{"2023-11-14T22:00:00Z", 0, true},
		{"2023-11-14T22:04:59Z", 0, true},
		{"2023-11-14T22:05:00Z", 0, false},
		{"2023-11-14T22:55:00Z", 0, false},
		{"2023-11-14T23:02:00+01:00", 0, true},  // 22:02 UTC
		{"2023-11-14T03:32:00+05:30", 0, true},  // 22:02 UTC
		{"2023-11-14T03:02:00+05:30", 0, false}, // 21:32 UTC
		{"2023-11-14T22:12:00Z", 15 * time.Minute, true},
		{"2023-11-14T22:17:00Z", 15 * time.Minute, false},
		{"2023-11-14T22:37:00Z", time.Hour, true},
		{"not a time", 0, true}, // the clock says 22:03
		{"", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.at, func(t *testing.T) {
			sw := &fakeSweeper{}
			opts := []reconcile.Option{reconcile.WithSweeper(sw, time.Hour),
				reconcile.WithClock(func() time.Time { return clockAt })}
			if tt.tick != 0 {
				opts = append(opts, reconcile.WithTick(tt.tick))
			}
			r := reconcile.New(nil, memstore.New(), opts...)
			if err := r.HandleEvent(t.Context(), tick("ev", tt.at)); err != nil {
				t.Fatal(err)
			}
			if got := sw.calls == 1; got != tt.want {
				t.Errorf("swept %v, want %v", got, tt.want)
			}
		})
	}
}

// fakeGauger answers as told.
type fakeGauger struct {
	live, stuck int
	err         error
}

func (f fakeGauger) WorkerGauges(context.Context) (int, int, error) { return f.live, f.stuck, f.err }

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

// A tick whose gauges fail is an error (the reconciler's error alarm), and
// the sweep still runs when due; a failed sweep does not keep the gauges
// from being emitted.
func TestHousekeepingFailures(t *testing.T) {
	unavailable := galleyerr.E(galleyerr.Unavailable, errors.New("ProvisionedThroughputExceededException"))
	tests := []struct {
		name      string
		gauger    fakeGauger
		sweepErr  error
		failWrite bool // the metrics writer fails
		at        string
		wantSweep bool
		wantLine  bool
		wantErr   bool
		wantKind  galleyerr.Kind // when not Other
		wantLog   string
	}{
		{name: "gauges fail, due sweep runs", gauger: fakeGauger{err: unavailable}, at: "2023-11-14T22:00:00Z",
			wantSweep: true, wantErr: true, wantKind: galleyerr.Unavailable,
			wantLog: `"msg":"worker gauges not counted","event":"ev","err":`},
		{name: "gauges fail, no sweep due", gauger: fakeGauger{err: unavailable}, at: "2023-11-14T22:30:00Z",
			wantErr: true, wantKind: galleyerr.Unavailable, wantLog: `"msg":"worker gauges not counted"`},
		{name: "sweep fails, gauges emitted", gauger: fakeGauger{live: 4, stuck: 2}, sweepErr: unavailable,
			at: "2023-11-14T22:00:00Z", wantSweep: true, wantLine: true, wantErr: true, wantKind: galleyerr.Unavailable,
			wantLog: `"msg":"doorbell sweep failed"`},
		{name: "metrics writer fails", gauger: fakeGauger{live: 4, stuck: 2}, failWrite: true, at: "2023-11-14T22:00:00Z",
			wantSweep: true, wantErr: true, wantLog: `"msg":"worker gauges not emitted","event":"ev","live":4,"stuck":2`},
		{name: "all well", gauger: fakeGauger{live: 4, stuck: 2}, at: "2023-11-14T22:00:00Z", wantSweep: true, wantLine: true,
			wantLog: `"msg":"worker gauges","event":"ev","live":4,"stuck":2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, logs bytes.Buffer
			var w io.Writer = &out
			if tt.failWrite {
				w = failingWriter{}
			}
			sw := &fakeSweeper{err: tt.sweepErr}
			r := reconcile.New(nil, memstore.New(), reconcile.WithSweeper(sw, time.Hour), reconcile.WithGauges(tt.gauger, "origin89"),
				reconcile.WithMetrics(w), reconcile.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
			err := r.HandleEvent(t.Context(), tick("ev", tt.at))
			if (err != nil) != tt.wantErr {
				t.Fatalf("HandleEvent = %v, want an error %v", err, tt.wantErr)
			}
			if tt.wantKind != galleyerr.Other && !galleyerr.Is(tt.wantKind, err) {
				t.Errorf("error %v, want kind %v", err, tt.wantKind)
			}
			if got := sw.calls == 1; got != tt.wantSweep {
				t.Errorf("swept %v, want %v", got, tt.wantSweep)
			}
			if got := out.Len() > 0; got != tt.wantLine {
				t.Errorf("EMF line written %v, want %v: %q", got, tt.wantLine, out.String())
			}
			if tt.wantLine {
				if g := gauges(t, &out); len(g) != 1 || g[0][contract.MetricLiveWorkers] != 4 || g[0][contract.MetricStuckWorkers] != 2 {
					t.Errorf("gauges %v, want 4 live, 2 stuck", g)
				}
			}
			if !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("log %s lacks %s", logs.String(), tt.wantLog)
			}
		})
	}
}

// Without a gauger a tick writes no metric (the local shape, and tests).
func TestHousekeepingWithoutGauges(t *testing.T) {
	var out bytes.Buffer
	sw := &fakeSweeper{}
	r := reconcile.New(nil, memstore.New(), reconcile.WithSweeper(sw, time.Hour), reconcile.WithMetrics(&out))
	if err := r.HandleEvent(t.Context(), tick("ev", "2023-11-14T22:00:00Z")); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || sw.calls != 1 {
		t.Errorf("wrote %q and swept %d times, want nothing and one sweep", out.String(), sw.calls)
	}
}
