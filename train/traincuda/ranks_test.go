package traincuda

import (
	"reflect"
	"testing"

	"dflash/rendezvous"
)

// TestPlaceRanks checks which ranks this process runs, on which GPUs, and
// how they get their communicator, for one process and for a job of
// several (one rank per process, on its local rank's GPU).
func TestPlaceRanks(t *testing.T) {
	one := rendezvous.Launch{WorldSize: 1}
	for _, c := range []struct {
		name string
		gpus []int
		l    rendezvous.Launch
		want Placement
		lead bool
		err  string
	}{
		{"default", nil, one, Placement{Ranks: []int{0}, GPUs: []int{0}, World: 1, Comm: NoComm}, true, ""},
		{"one GPU", []int{3}, one, Placement{Ranks: []int{0}, GPUs: []int{3}, World: 1, Comm: NoComm}, true, ""},
		{"two GPUs", []int{1, 0}, one, Placement{Ranks: []int{0, 1}, GPUs: []int{1, 0}, World: 2, Comm: LocalComm}, true, ""},
		{"process rank 2", nil, rendezvous.Launch{Rank: 2, WorldSize: 4, LocalRank: 0, Addr: "h:29500"},
			Placement{Ranks: []int{2}, GPUs: []int{0}, World: 4, Comm: RendezvousComm, Addr: "h:29500"}, false, ""},
		{"process rank 0", nil, rendezvous.Launch{Rank: 0, WorldSize: 2, LocalRank: 0, Addr: "h:1"},
			Placement{Ranks: []int{0}, GPUs: []int{0}, World: 2, Comm: RendezvousComm, Addr: "h:1"}, true, ""},
		{"GPUs and processes", []int{0, 1}, rendezvous.Launch{Rank: 1, WorldSize: 2, LocalRank: 1, Addr: "h:1"}, Placement{}, false,
			"--gpus [0 1] with a world of 2 processes: each process drives one GPU, its local rank (LOCAL_RANK, else the rank); leave --gpus out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := PlaceRanks(c.gpus, c.l, "--gpus")
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("err %v, want %s", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) || got.Lead() != c.lead {
				t.Fatalf("got %+v (lead %v) %v, want %+v (lead %v)", got, got.Lead(), err, c.want, c.lead)
			}
		})
	}
}
