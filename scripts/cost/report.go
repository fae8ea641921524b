package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// share is a part of a window's counts, as numbers that scale.
type share struct {
	requests       map[string]float64 // "service:Operation"
	empty          float64            // SQS empty receives
	rru, wru, est  float64
	routes         map[string]float64
	invocations    map[string]float64 // by function
	gbSeconds      map[string]float64
	maxInFlight    map[string]int
	taskSeconds    float64
	tasksStarted   float64
	functionsShown []string
}

// coordinatorRole, coordinatorRoutes and coordinatorFunction are what a
// waiting coordinator uses: the mailbox function and its role, and the
// deliveries routes. Everything else in the idle window is the workers'.
const coordinatorRole = "MailboxRole"

var coordinatorRoutes = []string{
	contract.RouteNext.Pattern(), contract.RouteAcknowledge.Pattern(), contract.RouteAwait.Pattern(),
}

// split takes from u the coordinator's part (coord) or the rest.
func split(u awslocal.Usage, coord bool) share {
	s := share{requests: map[string]float64{}, routes: map[string]float64{}, invocations: map[string]float64{},
		gbSeconds: map[string]float64{}, maxInFlight: map[string]int{}}
	for role, ru := range u.ByRole {
		if strings.HasPrefix(role, coordinatorRole) != coord {
			continue
		}
		for op, n := range ru.Requests {
			s.requests[op] += float64(n)
		}
		s.empty += float64(ru.EmptyReceives)
		s.rru += ru.Read
		s.wru += ru.Write
	}
	for route, n := range u.Routes {
		if slices.Contains(coordinatorRoutes, route) == coord {
			s.routes[route] += float64(n)
		}
	}
	for fn, f := range u.Functions {
		if (fn == lambdaapp.Mailbox) != coord || f.Invocations == 0 && f.MaxInFlight == 0 {
			continue
		}
		s.invocations[string(fn)] = float64(f.Invocations)
		s.gbSeconds[string(fn)] = f.GBSeconds
		s.maxInFlight[string(fn)] = f.MaxInFlight
	}
	if !coord {
		s.taskSeconds, s.tasksStarted = u.Tasks.TaskSeconds, float64(u.Tasks.Started)
		for _, c := range u.Capacity {
			s.est += c.Estimated
		}
	}
	return s
}

// all is the whole of u.
func all(u awslocal.Usage) share {
	a, b := split(u, false), split(u, true)
	for k, v := range b.requests {
		a.requests[k] += v
	}
	for k, v := range b.routes {
		a.routes[k] += v
	}
	for k, v := range b.invocations {
		a.invocations[k] += v
		a.gbSeconds[k] += b.gbSeconds[k]
	}
	a.empty, a.rru, a.wru = a.empty+b.empty, a.rru+b.rru, a.wru+b.wru
	return a
}

func (s share) scale(f float64) share {
	out := share{requests: map[string]float64{}, routes: map[string]float64{}, invocations: map[string]float64{},
		gbSeconds: map[string]float64{}, maxInFlight: s.maxInFlight, empty: s.empty * f, rru: s.rru * f, wru: s.wru * f,
		est: s.est * f, taskSeconds: s.taskSeconds * f, tasksStarted: s.tasksStarted * f}
	for k, v := range s.requests {
		out.requests[k] = v * f
	}
	for k, v := range s.routes {
		out.routes[k] = v * f
	}
	for k, v := range s.invocations {
		out.invocations[k] = v * f
		out.gbSeconds[k] = s.gbSeconds[k] * f
	}
	return out
}

func total(m map[string]float64, prefix string) float64 {
	t := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			t += v
		}
	}
	return t
}

// line is one priced line.
type line struct {
	what   string
	count  float64
	unit   string
	dollar float64
}

// price prices a share at prices.go's table.
func (s share) price() ([]line, float64) {
	api, inv, gbs := total(s.routes, ""), total(s.invocations, ""), total(s.gbSeconds, "")
	sqs, secrets := total(s.requests, "sqs:"), total(s.requests, "secretsmanager:")
	lines := []line{
		{"API Gateway requests", api, "requests", api * priceAPIGatewayPerMillion / 1e6},
		{"Lambda requests", inv, "invocations", inv * priceLambdaPerMillion / 1e6},
		{"Lambda duration", gbs, "GB-s", gbs * priceLambdaGBSecondArm},
		{"DynamoDB reads", s.rru, "RRU", s.rru * priceDynamoRRUPerMillion / 1e6},
		{"DynamoDB writes", s.wru, "WRU", s.wru * priceDynamoWRUPerMillion / 1e6},
		{"SQS requests", sqs, "requests", sqs * priceSQSPerMillion / 1e6},
		{"Secrets Manager calls", secrets, "calls", secrets * priceSecretsPer10k / 1e4},
		{"ECS API calls (free)", total(s.requests, "ecs:"), "calls", 0},
	}
	t := 0.0
	for _, l := range lines {
		t += l.dollar
	}
	return lines, t
}

func num(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

func usd(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x < 0.0001:
		return fmt.Sprintf("%.7f", x)
	case x < 0.01:
		return fmt.Sprintf("%.5f", x)
	}
	return fmt.Sprintf("%.4f", x)
}

// table prints a share's priced lines and its counts in detail.
func table(w io.Writer, title, per string, s share) float64 {
	lines, t := s.price()
	fmt.Fprintf(w, "\n#### %s\n\n| line | count %s | $ %s |\n| --- | ---: | ---: |\n", title, per, per)
	for _, l := range lines {
		fmt.Fprintf(w, "| %s | %s %s | %s |\n", l.what, num(l.count), l.unit, usd(l.dollar))
	}
	fmt.Fprintf(w, "| **total** | | **%s** |\n", usd(t))
	var detail []string
	for _, k := range sortedKeys(s.requests) {
		detail = append(detail, fmt.Sprintf("%s %s", k, num(s.requests[k])))
	}
	fmt.Fprintf(w, "\nAWS requests: %s", strings.Join(detail, ", "))
	if s.empty > 0 {
		fmt.Fprintf(w, " (of the SQS receives, %s empty)", num(s.empty))
	}
	if s.est > 0 {
		fmt.Fprintf(w, "; %s WRU of failed conditions (estimated, docs/aws-local.md)", num(s.est))
	}
	detail = nil
	for _, k := range sortedKeys(s.routes) {
		detail = append(detail, fmt.Sprintf("`%s` %s", k, num(s.routes[k])))
	}
	fmt.Fprintf(w, ".\nAPI Gateway: %s.\n", strings.Join(detail, ", "))
	detail = nil
	for _, k := range sortedKeys(s.invocations) {
		d := fmt.Sprintf("%s %s invocations, %s GB-s", k, num(s.invocations[k]), num(s.gbSeconds[k]))
		if m, ok := s.maxInFlight[k]; ok {
			d += fmt.Sprintf(" (at most %d in flight)", m)
		}
		detail = append(detail, d)
	}
	fmt.Fprintf(w, "Lambda: %s.\n", strings.Join(detail, "; "))
	return t
}

func report(w io.Writer, r *result) {
	c := r.cfg
	hours := r.windowLen.Hours()
	perWorkerHour := split(r.window, false).scale(1 / (hours * float64(c.workers)))
	perCoordHour := split(r.window, true).scale(1 / hours)
	oneOff := all(r.launch).scale(1 / float64(c.launches))
	release := all(r.release).scale(1 / float64(c.workers))

	fmt.Fprintf(w, "### Measured: `%s`\n\n", r.command)
	fmt.Fprintf(w, "%s, on %s; aws-local from `%s`. %d launches, each asking one question answered by a reply; "+
		"%d workers idle for %s (measured window %s) while one coordinator awaits (`waitMs` 25,000); then each idle worker "+
		"released by a message. Prices of %s (scripts/cost/prices.go). Counts are per hour of the window, scaled.\n",
		r.started.UTC().Format("2006-01-02 15:04 UTC"), machine(), c.template, c.launches, c.workers, c.idle,
		r.windowLen.Round(time.Second), pricesChecked)
	wh := table(w, "An idle worker, per worker-hour (measured)", "/ worker-hour", perWorkerHour)
	ch := table(w, "A waiting coordinator, per coordinator-hour (measured)", "/ coordinator-hour", perCoordHour)
	lo := table(w, "Once per worker: launch and question (measured)", "/ worker", oneOff)
	ro := table(w, "Once per worker: release (measured)", "/ worker", release)

	fargate := r.vcpu*priceFargateVCPUHourArm + r.memGB*priceFargateGBHourArm +
		max(r.storageGB-fargateFreeStorageGB, 0)*priceFargateStorageGBHour
	logs := assumedLogMBPerWorkerHour / 1024 * priceLogsIngestPerGB
	fmt.Fprintf(w, "\n#### A house per hour, workers living 1 hour each, one coordinator waiting\n\n")
	fmt.Fprintf(w, "| line | source | 10 workers | 100 workers | 1,000 workers |\n| --- | --- | ---: | ---: | ---: |\n")
	row := func(what, src string, f func(n float64) float64) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", what, src, usd(f(10)), usd(f(100)), usd(f(1000)))
	}
	control := func(n float64) float64 { return n*(wh+lo+ro) + ch }
	row(fmt.Sprintf("Fargate (%.0f vCPU, %.0f GB, %.0f GB of storage, Arm)", r.vcpu, r.memGB, r.storageGB), "assumed price × template size", func(n float64) float64 { return n * fargate })
	row("Idle workers' control plane", "measured", func(n float64) float64 { return n * wh })
	row("Launch, question, release (once per worker-hour)", "measured", func(n float64) float64 { return n * (lo + ro) })
	row("Coordinator awaiting", "measured", func(float64) float64 { return ch })
	row(fmt.Sprintf("Logs (%.0f MB per worker-hour)", assumedLogMBPerWorkerHour), "assumed", func(n float64) float64 { return n * logs })
	row("Fixed lines (secrets, alarms, dashboard, metrics, Container Insights, ECR)", "assumed", func(float64) float64 { return fixedPerMonth / hoursPerMonth })
	row("The workers' network (2 AZs: endpoints, egress proxy, Cloud Map, DNS Firewall)", "assumed", func(float64) float64 { return networkPerMonth(2) / hoursPerMonth })
	houseHour := func(n float64) float64 {
		return n*(fargate+logs) + control(n) + (fixedPerMonth+networkPerMonth(2))/hoursPerMonth
	}
	row("**total per hour**", "", houseHour)
	fmt.Fprintf(w, "| **total per month** (720 h, that many workers live all the time) | | %.2f | %.2f | %.2f |\n",
		houseHour(10)*hoursPerMonth, houseHour(100)*hoursPerMonth, houseHour(1000)*hoursPerMonth)
	fmt.Fprintf(w, "| control plane ÷ Fargate | measured ÷ assumed | %.1f %% | %.1f %% | %.1f %% |\n",
		100*control(10)/(10*fargate), 100*control(100)/(100*fargate), 100*control(1000)/(1000*fargate))
	fmt.Fprintf(w, "\nAn idle worker's control plane alone: $%s per worker-hour, %.1f %% of its Fargate $%s.\n",
		usd(wh), 100*wh/fargate, usd(fargate))
	parkReport(w, workerTask{vcpu: r.vcpu, memGB: r.memGB, storageGB: r.storageGB, controlPerHour: wh, launchControl: lo},
		defaultPark, fmt.Sprintf("$%s a worker-hour and $%s a launch, measured above", usd(wh), usd(lo)))
}
