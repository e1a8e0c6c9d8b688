package node

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/splitengine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/stageplan"
)

// idlePipeline is a pipeline that is never stepped: status only asks the
// engine whether it has one.
type idlePipeline struct{}

func (idlePipeline) Step(context.Context, []stage.Seq) ([]stage.Result, error) { return nil, nil }
func (idlePipeline) Trim(context.Context, uint64, int) error                   { return nil }
func (idlePipeline) Finish(context.Context, uint64, receipt.ContentID) (*engine.Split, error) {
	return nil, nil
}
func (idlePipeline) Close(context.Context) error { return nil }
func (idlePipeline) Rows() int                   { return 1 }
func (idlePipeline) Windows() bool               { return true }
func (idlePipeline) WeightBytes() int64          { return 1 }

// TestSplitStatusLost: between the engine dropping a failed pipeline
// (before the request that failed on it is answered) and placeSplit
// hearing of it, the status says the model is being placed again and
// shows no stages, instead of the lost plan serving; a client polling the
// status after its 503 waits for the new plan, not the old one.
func TestSplitStatusLost(t *testing.T) {
	plan := stageplan.Plan{Stages: []stageplan.Stage{{Host: "head", Lo: 0, Hi: 2, Bytes: 10}, {Host: "peer", Lo: 2, Hi: 4, Bytes: 20}}}
	sm := &splitModel{eng: splitengine.New(splitengine.Config{}, nil)}
	sm.eng.Set(idlePipeline{})
	sm.setState(plan, "serving")
	if st := sm.status(); st.State != "serving" || len(st.Stages) != 2 || st.Stages[1].Node != "peer" || st.Stages[1].Layers != "2-4" {
		t.Fatalf("serving: %+v", st)
	}
	sm.eng.Set(nil) // what a failed step does, before its serve returns
	if st := sm.status(); st.State != lostState || len(st.Stages) != 0 {
		t.Fatalf("after the loss: %+v, want %q and no stages", st, lostState)
	}
	sm.setState(stageplan.Plan{}, "placing again: why")
	if st := sm.status(); st.State != "placing again: why" {
		t.Fatalf("placing: %+v", st)
	}
}
