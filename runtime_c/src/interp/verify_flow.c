/* Whole-executable proofs that no single instruction's check can give (docs/bytecode.md, "What
 * the verifier proves"). Kernels read a TENSOR_DATA tensor through the frame pointer a BIND of
 * the Load program sets (or the session's copy of an overridden weight, which replaces that
 * BIND); until then the pointer is NULL. So every TENSOR_DATA tensor an instruction reads must be
 * bound by the Load program before the read: by an earlier BIND when the reader is in the Load
 * program, by any BIND of it otherwise (Main, stage and copy programs run only after the whole
 * Load program, whichever subgraph an iteration selects). */
#include "interp.h"
#include "kernels/kernels.h"

static ipu_status check_reads(const ipu_executable *e, const ipu__program *pr, bool is_load,
                              uint8_t *bound) {
    for (uint32_t i = 0; i < pr->n_instr; i++) {
        const ipu__instr *ins = &pr->instr[i];
        if (ins->op == IPU_OP_BIND) { /* only in the Load program (ipu__verify_instr) */
            bound[ins->out[0]] = 1;
            continue;
        }
        for (uint32_t k = 0; k < ins->n_in; k++) {
            uint32_t t = ins->in[k];
            if (e->tensors[t].loc != IPU_LOC_TENSOR_DATA || bound[t]) continue;
            const char *name = ipu_opcode_name(ins->op);
            return ipu__fail(IPU_ERR_BAD_PROGRAM,
                             "program %u instruction %u (%s): input %u reads TENSOR_DATA tensor "
                             "%u, which the Load program does not BIND%s", pr->id, i,
                             name ? name : "?", k, t, is_load ? " before it" : "");
        }
    }
    return IPU_OK;
}

ipu_status ipu__verify_binds(const ipu_executable *e) {
    uint32_t nt = e->info.num_tensors;
    uint8_t *bound = ipu__calloc(nt ? nt : 1, 1);
    if (!bound) return ipu__fail(IPU_ERR_NOMEM, "out of memory loading executable");
    ipu_status st = check_reads(e, &e->programs[e->load_program], true, bound);
    for (uint32_t k = 0; st == IPU_OK && k < e->info.num_programs; k++)
        if (k != e->load_program) st = check_reads(e, &e->programs[k], false, bound);
    ipu__free(bound);
    return st;
}
