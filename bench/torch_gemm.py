# PyTorch's matmul (MKL, one thread) on the products of bench/gemm_bench --shapes gpt, printed in the
# same columns: ~/.cache/torch-venv/bin/python bench/torch_gemm.py [reps]
import torch, time, sys
torch.set_num_threads(1)
shapes=[(False,True,768,384,128),(False,False,768,128,384),(True,False,384,128,768),
        (False,True,768,512,128),(False,False,768,128,512),(True,False,512,128,768),
        (False,True,64,64,32),(False,False,64,32,64),(True,False,64,32,64)]
reps=int(sys.argv[1]) if len(sys.argv)>1 else 20
tot=0
for ta,tb,m,n,k in shapes:
    a=torch.rand(k,m)*2-1 if ta else torch.rand(m,k)*2-1
    b=torch.rand(n,k)*2-1 if tb else torch.rand(k,n)*2-1
    A=a.t() if ta else a; B=b.t() if tb else b
    c=torch.empty(m,n)
    for _ in range(20): torch.matmul(A,B,out=c)
    us=[]
    for r in range(7):
        t0=time.perf_counter()
        for _ in range(reps): torch.matmul(A,B,out=c)
        us.append((time.perf_counter()-t0)/reps*1e6)
    us.sort(); med=us[3]; tot+=med
    print("%s%s m=%4d n=%4d k=%4d  median_us %8.1f  best_us %8.1f  GFLOP/s %6.1f"%("T" if ta else "N","T" if tb else "N",m,n,k,med,us[0],2e-3*m*n*k/med))
print("total_us %.1f"%tot)
