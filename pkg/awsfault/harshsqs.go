package awsfault

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"path"
	"sync"
	"time"
)

// HarshSQS is an http.RoundTripper in front of a stand-in SQS (fauxqs)
// that behaves as AWS's SQS does where the stand-in is kinder:
//
//   - CreateQueue of a name deleted less than DeletedFor ago (60 s on AWS)
//     answers QueueDeletedRecently, and nothing is created.
//   - A short poll (a ReceiveMessage with WaitTimeSeconds 0) samples: with
//     probability MissRate it answers no message, whatever waits.
//   - A receipt handle from a receive whose visibility timeout is 0 has
//     expired when it comes back: deleting with it fails
//     (InvalidParameterValue, "The receipt handle has expired"), and the
//     message stays.
//
// It learns a queue's visibility timeout from the CreateQueue that passed
// through it (30 s, SQS's default, for a queue it never saw created). Its
// counters say how often each behaviour showed. docs/aws-local.md gives the
// sources.
type HarshSQS struct {
	Base       http.RoundTripper // nil: http.DefaultTransport
	Now        func() time.Time  // nil: time.Now
	DeletedFor time.Duration     // 0: no deleted-recently refusal
	MissRate   float64           // 0: short polls never miss
	// DeleteRate, injected (AWS has no such behaviour of its own), deletes
	// a queue just before a SendMessage to it with this probability, as a
	// sweep or an operator elsewhere would: the sender meets
	// QueueDoesNotExist, and then QueueDeletedRecently for DeletedFor.
	DeleteRate float64

	mu         sync.Mutex
	rng        *rand.Rand
	deleted    map[string]time.Time // queue name → deleted at
	visibility map[string]int       // queue name → its VisibilityTimeout
	expired    map[string]bool      // receipt handles of visibility-0 receives
	counts     HarshCounts
}

// HarshCounts is what a HarshSQS did.
type HarshCounts struct {
	DeletedRecently int `json:"deletedRecently"` // CreateQueue refused
	Misses          int `json:"shortPollMisses"` // short polls answered empty
	ExpiredHandles  int `json:"expiredHandles"`  // deletes refused for an expired handle
	Deleted         int `json:"queuesDeleted"`   // queues deleted by DeleteRate
}

// NewHarshSQS is a HarshSQS on base with AWS's behaviours on: a 60 s
// deleted-recently window and short polls that miss half the time, drawn
// from seed.
func NewHarshSQS(base http.RoundTripper, seed uint64) *HarshSQS {
	h := &HarshSQS{Base: base, DeletedFor: 60 * time.Second, MissRate: 0.5}
	h.Seed(seed)
	return h
}

// Seed reseeds the short polls' draws.
func (h *HarshSQS) Seed(seed uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rng = rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
}

// Counts reads the counters.
func (h *HarshSQS) Counts() HarshCounts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts
}

const maxExpired = 100000

func (h *HarshSQS) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *HarshSQS) base() http.RoundTripper {
	if h.Base != nil {
		return h.Base
	}
	return http.DefaultTransport
}

// The parts of SQS's JSON requests and answers HarshSQS reads.
type sqsReq struct {
	QueueName         string            `json:"QueueName"`
	QueueURL          string            `json:"QueueUrl"`
	Attributes        map[string]string `json:"Attributes"`
	WaitTimeSeconds   *int              `json:"WaitTimeSeconds"`
	VisibilityTimeout *int              `json:"VisibilityTimeout"`
	ReceiptHandle     string            `json:"ReceiptHandle"`
	Entries           []batchEntry      `json:"Entries"`
}

type batchEntry struct {
	ID            string `json:"Id"`
	ReceiptHandle string `json:"ReceiptHandle"`
}

type batchFailure struct {
	ID          string `json:"Id"`
	Code        string `json:"Code"`
	Message     string `json:"Message"`
	SenderFault bool   `json:"SenderFault"`
}

var (
	sqsDeletedRecently = WireError{400, "com.amazonaws.sqs#QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently;Sender",
		"You must wait 60 seconds after deleting a queue before you can create another with the same name."}
	// An expired receipt handle, in the words of AWS's knowledge center
	// article on receipt handle errors.
	sqsHandleExpired = WireError{400, "com.amazonaws.sqs#InvalidParameterValue", "InvalidParameterValue;Sender",
		"Value for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."}
)

// RoundTrip implements http.RoundTripper.
func (h *HarshSQS) RoundTrip(r *http.Request) (*http.Response, error) {
	svc, op := wireOp(r)
	if svc != wireSQS || r.Body == nil {
		return h.base().RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	var in sqsReq
	_ = json.Unmarshal(body, &in) // unreadable: the stand-in answers it
	name := in.QueueName
	if name == "" && in.QueueURL != "" {
		name = path.Base(in.QueueURL)
	}
	forward := func(b []byte) (*http.Response, error) {
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(b))
		r2.ContentLength = int64(len(b))
		r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		return h.base().RoundTrip(r2)
	}
	switch op {
	case "CreateQueue":
		h.mu.Lock()
		at, ok := h.deleted[name]
		refuse := ok && h.now().Sub(at) < h.DeletedFor
		if refuse {
			h.counts.DeletedRecently++
		}
		h.mu.Unlock()
		if refuse {
			return wireError(r, sqsDeletedRecently), nil
		}
		resp, err := forward(body)
		if err == nil && resp.StatusCode == http.StatusOK {
			vis := 30
			if v, ok := in.Attributes["VisibilityTimeout"]; ok {
				_ = json.Unmarshal([]byte(v), &vis)
			}
			h.mu.Lock()
			if h.visibility == nil {
				h.visibility = map[string]int{}
			}
			h.visibility[name] = vis
			h.mu.Unlock()
		}
		return resp, err
	case "DeleteQueue":
		resp, err := forward(body)
		if err == nil && resp.StatusCode == http.StatusOK {
			h.mu.Lock()
			if h.deleted == nil {
				h.deleted = map[string]time.Time{}
			}
			h.deleted[name] = h.now()
			delete(h.visibility, name)
			h.mu.Unlock()
		}
		return resp, err
	case "SendMessage":
		h.mu.Lock()
		del := h.DeleteRate > 0 && h.rng != nil && h.rng.Float64() < h.DeleteRate
		h.mu.Unlock()
		if del && h.deleteUnder(r, in.QueueURL, name) {
			h.mu.Lock()
			h.counts.Deleted++
			h.mu.Unlock()
		}
	case "ReceiveMessage":
		if in.WaitTimeSeconds == nil || *in.WaitTimeSeconds == 0 {
			h.mu.Lock()
			miss := h.MissRate > 0 && h.rng != nil && h.rng.Float64() < h.MissRate
			if miss {
				h.counts.Misses++
			}
			h.mu.Unlock()
			if miss {
				return jsonResponse(r, http.StatusOK, []byte("{}"), ""), nil
			}
		}
		resp, err := forward(body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		h.mu.Lock()
		vis, known := h.visibility[name]
		h.mu.Unlock()
		if in.VisibilityTimeout != nil {
			vis, known = *in.VisibilityTimeout, true
		}
		if !known || vis != 0 {
			return resp, nil
		}
		return h.noteExpired(resp)
	case "DeleteMessage":
		if h.isExpired(in.ReceiptHandle) {
			return wireError(r, sqsHandleExpired), nil
		}
	case "DeleteMessageBatch":
		var keep []batchEntry
		var failed []batchFailure
		for _, e := range in.Entries {
			if h.isExpired(e.ReceiptHandle) {
				failed = append(failed, batchFailure{ID: e.ID, Code: "InvalidParameterValue", Message: sqsHandleExpired.Message, SenderFault: true})
			} else {
				keep = append(keep, e)
			}
		}
		if len(failed) == 0 {
			break
		}
		return h.partialBatch(r, forward, body, keep, failed)
	}
	return forward(body)
}

// deleteUnder deletes the queue at url through the stand-in, with r's
// headers (the stand-in does not check signatures; a gate in front of this
// layer already did), and remembers the deletion.
func (h *HarshSQS) deleteUnder(r *http.Request, url, name string) bool {
	b, _ := json.Marshal(map[string]string{"QueueUrl": url})
	d := r.Clone(r.Context())
	d.Header.Set("X-Amz-Target", wireSQS+"DeleteQueue")
	d.Body = io.NopCloser(bytes.NewReader(b))
	d.ContentLength = int64(len(b))
	d.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	resp, err := h.base().RoundTrip(d)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	h.mu.Lock()
	if h.deleted == nil {
		h.deleted = map[string]time.Time{}
	}
	h.deleted[name] = h.now()
	delete(h.visibility, name)
	h.mu.Unlock()
	return true
}

func (h *HarshSQS) isExpired(handle string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.expired[handle] {
		h.counts.ExpiredHandles++
		return true
	}
	return false
}

// noteExpired reads a visibility-0 receive's answer and remembers its
// receipt handles as expired.
func (h *HarshSQS) noteExpired(resp *http.Response) (*http.Response, error) {
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var out struct {
		Messages []struct {
			ReceiptHandle string `json:"ReceiptHandle"`
		} `json:"Messages"`
	}
	if json.Unmarshal(b, &out) == nil && len(out.Messages) > 0 {
		h.mu.Lock()
		if h.expired == nil || len(h.expired) >= maxExpired {
			h.expired = map[string]bool{}
		}
		for _, m := range out.Messages {
			h.expired[m.ReceiptHandle] = true
		}
		h.mu.Unlock()
	}
	return resp, nil
}

// partialBatch forwards the entries in keep (if any) and answers their
// results together with the refused ones.
func (h *HarshSQS) partialBatch(r *http.Request, forward func([]byte) (*http.Response, error), body []byte, keep []batchEntry, failed []batchFailure) (*http.Response, error) {
	out := struct {
		Successful []json.RawMessage `json:"Successful"`
		Failed     []batchFailure    `json:"Failed"`
	}{Successful: []json.RawMessage{}}
	if len(keep) > 0 {
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil {
			return forward(body)
		}
		req["Entries"] = keep
		b, _ := json.Marshal(req)
		resp, err := forward(b)
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		rb, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(rb, &out); err != nil {
			return nil, err
		}
		if out.Successful == nil {
			out.Successful = []json.RawMessage{}
		}
	}
	out.Failed = append(out.Failed, failed...)
	b, _ := json.Marshal(out)
	return jsonResponse(r, http.StatusOK, b, ""), nil
}
