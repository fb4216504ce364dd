"""Unit tests of the reference: chunked KDA == recurrence, incremental == full forward,
safetensors round trip. Run: /usr/bin/python3 -m unittest discover -s tools/reference/tests"""
import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kimi_linear as kl  # noqa: E402
import llama  # noqa: E402
import safetensors_io as st  # noqa: E402

torch.set_num_threads(2)


def rand_inputs(B, T, nh, dk, dv, decay_scale, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = kl.l2_norm(torch.randn(B, T, nh, dk, generator=g, dtype=dtype)) * dk ** -0.5
    k = kl.l2_norm(torch.randn(B, T, nh, dk, generator=g, dtype=dtype))
    v = torch.randn(B, T, nh, dv, generator=g, dtype=dtype)
    gl = -torch.rand(B, T, nh, dk, generator=g, dtype=dtype) * decay_scale
    beta = torch.rand(B, T, nh, generator=g, dtype=dtype)
    S0 = torch.randn(B, nh, dk, dv, generator=g, dtype=dtype) * 0.1
    return q, k, v, gl, beta, S0


class TestKDA(unittest.TestCase):
    def test_chunked_matches_recurrence(self):
        for chunk in (64, 16, 5):
            for T in (1, 7, 64, 130):
                for decay in (0.05, 3.0, 50.0):  # includes decays that overflow a naive exp(-G)
                    q, k, v, g, b, S0 = rand_inputs(2, T, 3, 8, 6, decay, seed=T + chunk)
                    o1, s1 = kl.kda_recurrent(q, k, v, g, b, S0)
                    o2, s2 = kl.kda_chunked(q, k, v, g, b, S0, chunk)
                    self.assertTrue(torch.allclose(o1, o2, atol=1e-10, rtol=1e-8), (chunk, T, decay))
                    self.assertTrue(torch.allclose(s1, s2, atol=1e-10, rtol=1e-8), (chunk, T, decay))

    def test_fast_matches_recurrence(self):
        for chunk in (32, 16):
            for T in (5, 64, 100):
                q, k, v, g, b, S0 = rand_inputs(2, T, 2, 8, 6, 5.0, seed=T)
                o1, s1 = kl.kda_recurrent(q, k, v, g, b, S0)
                o2, s2 = kl.kda_chunked_fast(q, k, v, g, b, S0, chunk)
                self.assertTrue(torch.allclose(o1, o2, atol=1e-9), (chunk, T))
                self.assertTrue(torch.allclose(s1, s2, atol=1e-9), (chunk, T))
        q, k, v, g, b, S0 = rand_inputs(2, 256, 2, 64, 64, 5.0, seed=9, dtype=torch.float32)
        o1, _ = kl.kda_recurrent(q, k, v, g, b, S0)
        o2, _ = kl.kda_chunked_fast(q, k, v, g, b, S0, 16)
        self.assertLess((o1 - o2).abs().max().item(), 1e-3)

    def test_chunked_f32(self):
        q, k, v, g, b, S0 = rand_inputs(1, 200, 2, 64, 64, 1.0, seed=3, dtype=torch.float32)
        o1, s1 = kl.kda_recurrent(q, k, v, g, b, S0)
        o2, s2 = kl.kda_chunked(q, k, v, g, b, S0, 64)
        self.assertLess((o1 - o2).abs().max().item(), 1e-4)
        self.assertLess((s1 - s2).abs().max().item(), 1e-4)


def tiny_config():
    return kl.KimiLinearConfig(vocab_size=97, hidden_size=32, num_hidden_layers=4, intermediate_size=48,
                               kda_layers=[1, 2, 3], full_attn_layers=[4], kda_num_heads=2, kda_head_dim=8,
                               num_attention_heads=2, kv_lora_rank=16, qk_nope_head_dim=8,
                               qk_rope_head_dim=4, v_head_dim=8, num_experts=4, num_experts_per_token=2,
                               moe_intermediate_size=16, num_shared_experts=1, routed_scaling_factor=2.5,
                               tie_word_embeddings=False)


class TestModel(unittest.TestCase):
    def test_incremental_equals_full(self):
        m = kl.KimiLinearForCausalLM(tiny_config()).init_weights(seed=1).double()
        with torch.no_grad():
            m.model.layers[1].block_sparse_moe.gate.e_score_correction_bias.copy_(torch.tensor([0.1, -0.2, 0.0, 0.3]))
        ids = torch.randint(0, 97, (1, 150), generator=torch.Generator().manual_seed(0))
        m.set_kda_mode("chunked", 64)
        full, _ = m(ids)
        m.set_kda_mode("recurrent")
        rec, _ = m(ids)
        self.assertTrue(torch.allclose(full, rec, atol=1e-9))
        # prefill 70 then decode one by one
        logits, states = m(ids[:, :70])
        outs = [logits]
        for t in range(70, 150):
            lt, states = m(ids[:, t:t + 1], states)
            outs.append(lt)
        inc = torch.cat(outs, dim=1)
        self.assertTrue(torch.allclose(full, inc, atol=1e-9))

    def test_save_load_roundtrip(self):
        m = kl.KimiLinearForCausalLM(tiny_config()).init_weights(seed=2)
        with tempfile.TemporaryDirectory() as d:
            m.save_pretrained(d, dtype=torch.bfloat16)
            sd = st.load_dir(d)
            self.assertEqual(sd["model.layers.0.self_attn.q_conv1d.weight"].dtype, torch.float32)
            self.assertEqual(sd["model.layers.0.self_attn.A_log"].dtype, torch.float32)
            self.assertEqual(sd["model.layers.0.self_attn.q_proj.weight"].dtype, torch.bfloat16)
            self.assertEqual(list(sd["model.layers.1.block_sparse_moe.experts.3.w2.weight"].shape), [32, 16])
            self.assertEqual(list(sd["model.layers.3.self_attn.kv_b_proj.weight"].shape), [2 * 16, 16])
            m2 = kl.KimiLinearForCausalLM.from_pretrained(d)
            for (n, a), b in zip(m.state_dict().items(), m2.state_dict().values()):
                self.assertTrue(torch.allclose(a.to(torch.bfloat16).float() if "conv1d" not in n and "A_log" not in n
                                               and "dt_bias" not in n and "correction" not in n else a, b), n)


class TestLlama(unittest.TestCase):
    def test_incremental_equals_full(self):
        c = llama.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=40, num_attention_heads=4,
                              num_key_value_heads=2, num_hidden_layers=2)
        m = llama.LlamaForCausalLM(c).init_weights(seed=0).double()
        ids = torch.randint(0, 50, (1, 20), generator=torch.Generator().manual_seed(0))
        full, _ = m(ids)
        logits, cache = m(ids[:, :9])
        outs = [logits]
        for t in range(9, 20):
            lt, cache = m(ids[:, t:t + 1], cache)
            outs.append(lt)
        self.assertTrue(torch.allclose(full, torch.cat(outs, 1), atol=1e-10))
        with tempfile.TemporaryDirectory() as d:
            m.float().save_pretrained(d, dtype=torch.float32)
            m2 = llama.LlamaForCausalLM.from_pretrained(d)
            self.assertTrue(torch.allclose(m2(ids)[0], m(ids)[0], atol=1e-5))


class TestGolden(unittest.TestCase):
    def test_make_golden_random_model(self):
        import json
        import subprocess
        m = kl.KimiLinearForCausalLM(tiny_config()).init_weights(seed=3)
        with tempfile.TemporaryDirectory() as d:
            m.save_pretrained(os.path.join(d, "m"), dtype=torch.bfloat16)
            out = os.path.join(d, "g.json")
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "make_golden.py")
            subprocess.run([sys.executable, script, "--model", os.path.join(d, "m"), "--out", out,
                            "--greedy", "2"], check=True, capture_output=True)
            with open(out) as f:
                g = json.load(f)
            self.assertTrue(g["full_logits"])
            lens = [len(p["ids"]) for p in g["prompts"]]
            self.assertIn(140, lens)
            ref = kl.KimiLinearForCausalLM.from_pretrained(os.path.join(d, "m"))
            p = g["prompts"][2]
            logits, _ = ref(torch.tensor([p["ids"]]))
            self.assertLess((logits[0] - torch.tensor(p["logits"])).abs().max().item(), 1e-4)
            # Decode-step logits: step i is the forward after feeding greedy token i.
            self.assertEqual(len(p["decode_logits"]), 2)
            self.assertEqual(g["decode_logits_n"], 97)
            for i in range(2):
                seq, _ = ref(torch.tensor([p["ids"] + p["greedy_next"][:i + 1]]))
                self.assertLess((seq[0, -1] - torch.tensor(p["decode_logits"][i])).abs().max().item(), 1e-4)
                self.assertEqual(p["decode_argmax"][i], int(torch.tensor(p["decode_logits"][i]).argmax()))


if __name__ == "__main__":
    unittest.main()
