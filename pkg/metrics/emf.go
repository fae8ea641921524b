package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"
)

// Dimension is one dimension of the metrics a document gives.
type Dimension struct{ Name, Value string }

// Metric is one value to emit.
type Metric struct {
	Name  string
	Unit  string // a CloudWatch unit; "" leaves it out (CloudWatch's None)
	Value float64
}

// Writer writes EMF documents to an io.Writer, one line per Emit in one
// Write, so that a line never interleaves with another writer's (the
// function's logger shares stdout). Safe for concurrent use.
type Writer struct {
	mu        sync.Mutex
	w         io.Writer
	namespace string
	dims      []Dimension
}

// NewWriter returns a Writer of metrics in namespace with dims as their
// one dimension set.
func NewWriter(w io.Writer, namespace string, dims ...Dimension) *Writer {
	return &Writer{w: w, namespace: namespace, dims: dims}
}

// Emit writes one document giving ms at t.
func (w *Writer) Emit(t time.Time, ms ...Metric) error {
	line, err := Encode(t, w.namespace, w.dims, ms)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.w.Write(line); err != nil {
		return fmt.Errorf("metrics: write: %w", err)
	}
	return nil
}

// The document's metadata, in the order the specification shows it.
type (
	metadata struct {
		Timestamp         int64       `json:"Timestamp"`
		CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
	}
	directive struct {
		Namespace  string       `json:"Namespace"`
		Dimensions [][]string   `json:"Dimensions"`
		Metrics    []definition `json:"Metrics"`
	}
	definition struct {
		Name string `json:"Name"`
		Unit string `json:"Unit,omitempty"`
	}
)

// Encode returns the EMF document giving ms at t, in namespace, with dims
// as their one dimension set: a JSON object on one line, ending in a
// newline. It refuses what CloudWatch would reject: a namespace, name or
// unit CloudWatch does not accept, more than MaxDimensions dimensions or
// MaxMetrics metrics, a value that is not a finite number, two members of
// one name.
func Encode(t time.Time, namespace string, dims []Dimension, ms []Metric) ([]byte, error) {
	if err := checkNamespace(namespace); err != nil {
		return nil, err
	}
	if len(dims) > MaxDimensions {
		return nil, fmt.Errorf("metrics: %d dimensions, more than %d", len(dims), MaxDimensions)
	}
	if len(ms) == 0 || len(ms) > MaxMetrics {
		return nil, fmt.Errorf("metrics: %d metrics, want 1 to %d", len(ms), MaxMetrics)
	}
	// Every dimension and metric is a member of the root, beside _aws.
	seen := map[string]bool{"_aws": true}
	names := make([]string, 0, len(dims))
	for _, d := range dims {
		if err := checkDimension(d.Name, d.Value); err != nil {
			return nil, err
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("metrics: member %q given twice", d.Name)
		}
		seen[d.Name] = true
		names = append(names, d.Name)
	}
	defs := make([]definition, 0, len(ms))
	for _, m := range ms {
		if err := checkMetric(m.Name, m.Unit); err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("metrics: member %q given twice", m.Name)
		}
		seen[m.Name] = true
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			return nil, fmt.Errorf("metrics: %s is %v, not a finite number", m.Name, m.Value)
		}
		defs = append(defs, definition{Name: m.Name, Unit: m.Unit})
	}

	meta, err := json.Marshal(metadata{Timestamp: t.UnixMilli(),
		CloudWatchMetrics: []directive{{Namespace: namespace, Dimensions: [][]string{names}, Metrics: defs}}})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(`{"_aws":`)
	b.Write(meta)
	member := func(name string, v any) {
		k, _ := json.Marshal(name)
		val, _ := json.Marshal(v) // strings and finite numbers always encode
		b.WriteByte(',')
		b.Write(k)
		b.WriteByte(':')
		b.Write(val)
	}
	for _, d := range dims {
		member(d.Name, d.Value)
	}
	for _, m := range ms {
		member(m.Name, m.Value)
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

var errEmpty = errors.New("is empty")

func checkNamespace(ns string) error {
	if err := checkText(ns, MaxNamespaceLen); err != nil {
		return fmt.Errorf("metrics: namespace %q %w", ns, err)
	}
	if strings.HasPrefix(ns, "AWS/") {
		return fmt.Errorf("metrics: namespace %q is reserved for AWS services", ns)
	}
	return nil
}

func checkDimension(name, value string) error {
	if err := checkText(name, MaxDimensionNameLen); err != nil {
		return fmt.Errorf("metrics: dimension name %q %w", name, err)
	}
	if strings.HasPrefix(name, ":") {
		return fmt.Errorf("metrics: dimension name %q starts with a colon", name)
	}
	if err := checkText(value, MaxDimensionValLen); err != nil {
		return fmt.Errorf("metrics: value of dimension %s %w", name, err)
	}
	return nil
}

func checkMetric(name, unit string) error {
	if err := checkText(name, MaxMetricNameLen); err != nil {
		return fmt.Errorf("metrics: metric name %q %w", name, err)
	}
	if unit != "" && !units[unit] {
		return fmt.Errorf("metrics: %s has unit %q, not a CloudWatch unit", name, unit)
	}
	return nil
}

// checkText holds s to what CloudWatch accepts in a name: 1 to max
// printable ASCII characters, not all of them spaces.
func checkText(s string, max int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errEmpty
	case len(s) > max:
		return fmt.Errorf("is longer than %d characters", max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return errors.New("holds a character other than printable ASCII")
		}
	}
	return nil
}
