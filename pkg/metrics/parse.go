package metrics

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"time"
)

// Datum is one metric data point an EMF document gives.
type Datum struct {
	Namespace  string
	Name       string
	Dimensions map[string]string // dimension name → value
	Value      float64
	Unit       string // "" when the document names none (CloudWatch's None)
	// Resolution is the storage resolution in seconds: 60 (standard, the
	// default) or 1 (high resolution).
	Resolution int
	Time       time.Time
}

// The document as Parse reads it: pointers tell a missing member from a
// zero one, raw values are type-checked by hand.
type (
	parsedMeta struct {
		Timestamp         json.RawMessage    `json:"Timestamp"`
		CloudWatchMetrics *[]parsedDirective `json:"CloudWatchMetrics"`
	}
	parsedDirective struct {
		Namespace  *string             `json:"Namespace"`
		Dimensions *[][]string         `json:"Dimensions"`
		Metrics    *[]parsedDefinition `json:"Metrics"`
	}
	parsedDefinition struct {
		Name              *string `json:"Name"`
		Unit              *string `json:"Unit"`
		StorageResolution *int    `json:"StorageResolution"`
	}
)

// Parse reads one log line as an EMF document and returns its data points:
// one per directive, dimension set, metric and value. It answers false for
// a line that is not an EMF document, or is one CloudWatch would reject
// (then no metric of it is extracted): a line that is not one JSON object
// alone, a missing or mistyped required member, a dimension set or metric
// list over its limit, a target member that is absent or of the wrong type
// (a dimension's must be a string, a metric's a number or an array of up to
// MaxValues numbers), an unknown unit or storage resolution.
func Parse(line []byte) ([]Datum, bool) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 || line[0] != '{' {
		return nil, false
	}
	var root map[string]json.RawMessage
	if json.Unmarshal(line, &root) != nil {
		return nil, false // not JSON, or more than one value on the line
	}
	var meta parsedMeta
	if raw, ok := root["_aws"]; !ok || !isObject(raw) || json.Unmarshal(raw, &meta) != nil ||
		meta.CloudWatchMetrics == nil {
		return nil, false
	}
	var ms float64
	if len(meta.Timestamp) == 0 || meta.Timestamp[0] == '"' || json.Unmarshal(meta.Timestamp, &ms) != nil ||
		ms < 0 || ms != math.Trunc(ms) {
		return nil, false
	}
	at := time.UnixMilli(int64(ms)).UTC()

	var out []Datum
	for _, d := range *meta.CloudWatchMetrics {
		if d.Namespace == nil || checkNamespace(*d.Namespace) != nil || d.Dimensions == nil || d.Metrics == nil ||
			len(*d.Metrics) > MaxMetrics {
			return nil, false
		}
		sets := make([]map[string]string, 0, len(*d.Dimensions))
		for _, set := range *d.Dimensions {
			if len(set) > MaxDimensions {
				return nil, false
			}
			dims := make(map[string]string, len(set))
			for _, name := range set {
				var v string
				raw, ok := root[name]
				if !ok || !isString(raw) || json.Unmarshal(raw, &v) != nil || checkDimension(name, v) != nil {
					return nil, false
				}
				dims[name] = v
			}
			sets = append(sets, dims)
		}
		for _, m := range *d.Metrics {
			if m.Name == nil {
				return nil, false
			}
			unit := ""
			if m.Unit != nil {
				unit = *m.Unit
			}
			if checkMetric(*m.Name, unit) != nil {
				return nil, false
			}
			res := 60
			if m.StorageResolution != nil {
				if res = *m.StorageResolution; res != 1 && res != 60 {
					return nil, false
				}
			}
			values, ok := metricValues(root[*m.Name])
			if !ok {
				return nil, false
			}
			for _, dims := range sets {
				for _, v := range values {
					out = append(out, Datum{Namespace: *d.Namespace, Name: *m.Name, Dimensions: maps.Clone(dims), Value: v,
						Unit: unit, Resolution: res, Time: at})
				}
			}
		}
	}
	return out, true
}

// metricValues reads a metric's target member: a number, or an array of
// 1 to MaxValues numbers.
func metricValues(raw json.RawMessage) ([]float64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false
	}
	switch raw[0] {
	case '[':
		var vs []json.RawMessage
		if json.Unmarshal(raw, &vs) != nil || len(vs) == 0 || len(vs) > MaxValues {
			return nil, false
		}
		out := make([]float64, 0, len(vs))
		for _, r := range vs {
			v, ok := number(r)
			if !ok {
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	default:
		v, ok := number(raw)
		return []float64{v}, ok
	}
}

func number(raw json.RawMessage) (float64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return 0, false // a string, bool, null, object or array
	}
	var v float64
	return v, json.Unmarshal(raw, &v) == nil
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

func isString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}
