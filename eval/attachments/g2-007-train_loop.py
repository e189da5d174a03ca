accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum)  # grad_accum = 16
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
num_update_steps = args.epochs * len(train_loader) // args.grad_accum
scheduler = get_cosine_schedule_with_warmup(
    optimizer, num_warmup_steps=2000, num_training_steps=num_update_steps
)
model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)

for epoch in range(args.epochs):
    for step, batch in enumerate(train_loader):
        with accelerator.accumulate(model):
            out = model(**batch)
            accelerator.backward(out.loss)
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()
        if step % 50 == 0:
            accelerator.print(step, out.loss.item(), scheduler.get_last_lr()[0])
