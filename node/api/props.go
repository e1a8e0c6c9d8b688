package api

import (
	"net/http"
)

// llama-server's GET /props: what its clients (llama.vscode, llama.cpp's
// web UI) read of the model before they ask, its context above all
// (default_generation_settings.n_ctx), its slots, its chat template and
// special tokens, and the sampling a /completion request gets by default.
// ?model= names the model; without it, the node's one model, or its
// mesh's (Server.soleModel). A model a peer hosts is described by the
// peer: the request is relayed, naming the model, as a generation is.

// llamaProps is GET /props's answer.
type llamaProps struct {
	DefaultGenerationSettings propsSettings   `json:"default_generation_settings"`
	TotalSlots                int             `json:"total_slots"`
	ModelAlias                string          `json:"model_alias"`
	ModelPath                 string          `json:"model_path"` // the model's name: a node shows no paths
	ChatTemplate              string          `json:"chat_template"`
	Modalities                map[string]bool `json:"modalities"`
	BOSToken                  *string         `json:"bos_token"`
	EOSToken                  *string         `json:"eos_token"`
	BuildInfo                 string          `json:"build_info"`
}

type propsSettings struct {
	NCtx   int           `json:"n_ctx"`
	Params llamaSettings `json:"params"`
}

func (s *Server) handleProps(w http.ResponseWriter, r *http.Request) {
	name, err := s.queryModel(r)
	if err != nil {
		writeError(w, err)
		return
	}
	m, handled := s.route(w, r, name, nil)
	if handled {
		return
	}
	// The defaults are what /completion makes of a request that sets
	// nothing.
	g, req, err := parseLlamaCompletion([]byte(`{"prompt":""}`))
	if err != nil {
		writeError(w, err)
		return
	}
	p := llamaProps{
		DefaultGenerationSettings: propsSettings{Params: llamaSettingsOf(g, req)},
		TotalSlots:                s.concurrency(m),
		ModelAlias:                name,
		ModelPath:                 name,
		Modalities:                map[string]bool{"vision": false, "audio": false},
		BuildInfo:                 s.cfg.Version,
	}
	if d, ok := m.(DescribedModel); ok {
		desc := d.Describe()
		p.DefaultGenerationSettings.NCtx, p.ChatTemplate = desc.Context, desc.Template
		p.DefaultGenerationSettings.Params.NCtx = desc.Context
	}
	if tm, ok := m.(TokenizingModel); ok {
		if info, err := tm.TokenizerInfo(); err == nil {
			p.BOSToken, p.EOSToken = info.BOSToken, info.EOSToken
		}
	}
	writeJSON(w, http.StatusOK, p)
}
